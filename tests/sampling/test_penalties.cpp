// Penalties: exactly the seen tokens change, by the right amounts; the window.
#include <algorithm>
#include <limits>
#include <vector>

#include "common/catch.hpp"
#include "ember/sampler.hpp"
#include "sampling/penalties.hpp"
#include "tests/sampling/helpers.hpp"

using ember::Sampler;
using ember::SamplerOptions;
using ember::sampling::apply_penalties;
using ember::sampling::PenaltyParams;
using ember::sampling::TokenCount;
using ember::sampling::TokenHistory;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMax = std::numeric_limits<float>::max();

// Counts of a history, sorted by token for comparison.
std::vector<std::pair<int32_t, int32_t>> sorted_counts(const TokenHistory& history) {
  std::vector<std::pair<int32_t, int32_t>> out;
  for (const TokenCount& entry : history.counts()) out.emplace_back(entry.token, entry.count);
  std::sort(out.begin(), out.end());
  return out;
}

using Counts = std::vector<std::pair<int32_t, int32_t>>;

// A sampler that always returns the argmax of the penalised logits.
Sampler greedy_with(float repetition, float frequency, float presence, int last_n) {
  SamplerOptions options;
  options.temperature = 0.0f;
  options.repetition_penalty = repetition;
  options.frequency_penalty = frequency;
  options.presence_penalty = presence;
  options.penalty_last_n = last_n;
  return Sampler(options);
}

}  // namespace

TEST_CASE("penalties change exactly the seen tokens by the right amounts", "[sampling][penalties]") {
  // Every value below is exact in binary floating point, so equality is exact.
  std::vector<float> logits{2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
  const std::vector<TokenCount> counts{{0, 1}, {1, 2}, {3, 3}};
  apply_penalties(logits, counts, PenaltyParams{2.0f, 0.5f, 0.25f});
  CHECK(logits[0] == 2.0f / 2 - (1 * 0.5f + 0.25f));   // 0.25: positive, divided
  CHECK(logits[1] == -1.0f * 2 - (2 * 0.5f + 0.25f));  // -3.25: negative, multiplied
  CHECK(logits[3] == 3.0f / 2 - (3 * 0.5f + 0.25f));   // -0.25
  CHECK(logits[0] == 0.25f);
  CHECK(logits[1] == -3.25f);
  CHECK(logits[3] == -0.25f);
  // Unseen tokens are untouched.
  CHECK(logits[2] == 0.5f);
  CHECK(logits[4] == -2.0f);
  CHECK(logits[5] == 1.0f);
}

TEST_CASE("each penalty alone", "[sampling][penalties]") {
  const std::vector<TokenCount> counts{{1, 3}, {2, 1}};
  SECTION("repetition only: count does not matter") {
    std::vector<float> logits{4.0f, 4.0f, -4.0f};
    apply_penalties(logits, counts, PenaltyParams{1.25f, 0.0f, 0.0f});
    CHECK(logits == std::vector<float>{4.0f, 3.2f, -5.0f});
  }
  SECTION("repetition below 1 encourages repeats") {
    std::vector<float> logits{4.0f, 4.0f, -4.0f};
    apply_penalties(logits, counts, PenaltyParams{0.5f, 0.0f, 0.0f});
    CHECK(logits == std::vector<float>{4.0f, 8.0f, -2.0f});
  }
  SECTION("frequency only: count times the value") {
    std::vector<float> logits{4.0f, 4.0f, -4.0f};
    apply_penalties(logits, counts, PenaltyParams{1.0f, 0.75f, 0.0f});
    CHECK(logits == std::vector<float>{4.0f, 1.75f, -4.75f});
  }
  SECTION("presence only: once, whatever the count") {
    std::vector<float> logits{4.0f, 4.0f, -4.0f};
    apply_penalties(logits, counts, PenaltyParams{1.0f, 0.0f, 1.5f});
    CHECK(logits == std::vector<float>{4.0f, 2.5f, -5.5f});
  }
  SECTION("negative frequency and presence raise the logit") {
    std::vector<float> logits{4.0f, 4.0f, -4.0f};
    apply_penalties(logits, counts, PenaltyParams{1.0f, -0.5f, -1.0f});
    CHECK(logits == std::vector<float>{4.0f, 6.5f, -2.5f});
  }
  SECTION("a zero logit is unchanged by repetition") {
    std::vector<float> logits{0.0f, 0.0f, 0.0f};
    apply_penalties(logits, counts, PenaltyParams{3.0f, 0.0f, 0.0f});
    CHECK(logits == std::vector<float>{0.0f, 0.0f, 0.0f});
  }
}

TEST_CASE("penalties keep -inf impossible and clamp overflow", "[sampling][penalties]") {
  std::vector<float> logits{-kInf, -3e38f, 3e38f, 1.0f};
  const std::vector<TokenCount> counts{{0, 1}, {1, 1}, {2, 1}, {3, 1}};
  apply_penalties(logits, counts, PenaltyParams{10.0f, 0.0f, 0.0f});
  CHECK(logits[0] == -kInf);
  CHECK(logits[1] == -kMax);  // -3e38 * 10 overflows
  CHECK(logits[2] == 3e37f);
  CHECK(logits[3] == 0.1f);

  std::vector<float> high{3e38f};
  apply_penalties(high, std::vector<TokenCount>{{0, 1}}, PenaltyParams{1.0f, 0.0f, -1e38f});
  CHECK(high[0] == kMax);  // 3e38 + 1e38 overflows
}

TEST_CASE("neutral penalties change nothing", "[sampling][penalties]") {
  std::vector<float> logits{1.0f, -2.0f};
  apply_penalties(logits, std::vector<TokenCount>{{0, 5}, {1, 1}}, PenaltyParams{});
  CHECK(logits == std::vector<float>{1.0f, -2.0f});
}

TEST_CASE("TokenHistory counts the last n tokens", "[sampling][penalties][history]") {
  TokenHistory history(3);
  for (int32_t t : {5, 7, 5}) history.push(t);
  CHECK(sorted_counts(history) == Counts{{5, 2}, {7, 1}});
  history.push(9);  // the first 5 leaves
  CHECK(sorted_counts(history) == Counts{{5, 1}, {7, 1}, {9, 1}});
  history.push(9);  // 7 leaves
  CHECK(sorted_counts(history) == Counts{{5, 1}, {9, 2}});
  CHECK(history.size() == 3);
  CHECK(history.max_token() == 9);
  history.push(1);
  history.push(1);  // 5 and one 9 leave
  CHECK(sorted_counts(history) == Counts{{1, 2}, {9, 1}});
  history.clear();
  CHECK(history.counts().empty());
  CHECK(history.size() == 0);
  CHECK(history.max_token() == -1);
}

TEST_CASE("TokenHistory with window -1 keeps everything, with 0 nothing", "[sampling][penalties][history]") {
  TokenHistory all(-1);
  for (int i = 0; i < 1000; ++i) all.push(i % 7);
  CHECK(all.size() == 1000);
  Counts expected;
  for (int32_t t = 0; t < 7; ++t) expected.emplace_back(t, 1000 / 7 + (t < 1000 % 7 ? 1 : 0));
  CHECK(sorted_counts(all) == expected);

  TokenHistory none(0);
  none.push(3);
  CHECK(none.size() == 0);
  CHECK(none.counts().empty());
}

TEST_CASE("TokenHistory over a long stream matches a recount of the window", "[sampling][penalties][history]") {
  TokenHistory history(50);
  std::vector<int32_t> stream;
  for (int i = 0; i < 2000; ++i) {
    const int32_t t = (i * 37 + i / 13) % 23;
    stream.push_back(t);
    history.push(t);
    if (i % 97 == 0 || i == 1999) {
      Counts expected;
      const size_t from = stream.size() > 50 ? stream.size() - 50 : 0;
      std::vector<int32_t> window(stream.begin() + static_cast<long>(from), stream.end());
      std::sort(window.begin(), window.end());
      for (size_t j = 0; j < window.size();) {
        size_t k = j;
        while (k < window.size() && window[k] == window[j]) ++k;
        expected.emplace_back(window[j], static_cast<int32_t>(k - j));
        j = k;
      }
      INFO("after " << i + 1 << " tokens");
      REQUIRE(sorted_counts(history) == expected);
    }
  }
}

TEST_CASE("Sampler applies the penalties before choosing", "[sampling][penalties][sampler]") {
  const std::vector<float> logits{5.0f, 4.0f, 1.0f};
  Sampler plain = greedy_with(1.0f, 0.0f, 0.0f, 64);
  plain.accept(0);
  CHECK(plain.sample(logits) == 0);

  Sampler repeat = greedy_with(2.0f, 0.0f, 0.0f, 64);
  repeat.accept(0);
  CHECK(repeat.sample(logits) == 1);  // 5 / 2 = 2.5 < 4

  Sampler frequency = greedy_with(1.0f, 0.6f, 0.0f, 64);
  frequency.accept(0);
  CHECK(frequency.sample(logits) == 0);  // 5 - 0.6 = 4.4 > 4
  frequency.accept(0);
  CHECK(frequency.sample(logits) == 1);  // 5 - 1.2 = 3.8 < 4

  Sampler presence = greedy_with(1.0f, 0.0f, 0.6f, 64);
  presence.accept(0);
  presence.accept(0);
  presence.accept(0);
  CHECK(presence.sample(logits) == 0);  // 5 - 0.6 once = 4.4 > 4
}

TEST_CASE("Sampler penalties look only at the last penalty_last_n tokens", "[sampling][penalties][sampler]") {
  const std::vector<float> logits{5.0f, 4.0f, 1.0f, 0.0f};
  Sampler windowed = greedy_with(2.0f, 0.0f, 0.0f, 2);
  windowed.accept(0);
  CHECK(windowed.sample(logits) == 1);
  windowed.accept(std::vector<int32_t>{2, 3});  // 0 leaves the window of 2
  CHECK(windowed.sample(logits) == 0);

  Sampler whole = greedy_with(2.0f, 0.0f, 0.0f, -1);
  whole.accept(0);
  for (int i = 0; i < 500; ++i) whole.accept(3);
  CHECK(whole.sample(logits) == 1);  // 0 is still penalised

  Sampler off = greedy_with(2.0f, 0.0f, 0.0f, 0);
  off.accept(0);
  CHECK(off.sample(logits) == 0);
}

TEST_CASE("reset() forgets the penalty history", "[sampling][penalties][sampler]") {
  const std::vector<float> logits{5.0f, 4.0f};
  Sampler sampler = greedy_with(2.0f, 0.0f, 0.0f, 64);
  sampler.accept(0);
  CHECK(sampler.sample(logits) == 1);
  sampler.reset();
  CHECK(sampler.sample(logits) == 0);
}

TEST_CASE("an accepted token outside the vocabulary is rejected at sample()", "[sampling][penalties][sampler]") {
  Sampler sampler = greedy_with(2.0f, 0.0f, 0.0f, 64);
  sampler.accept(7);
  ember::test::expect_invalid([&] { sampler.sample(std::vector<float>{1.0f, 2.0f}); }, "accepted token 7");
  CHECK(sampler.sample(std::vector<float>(8, 0.0f)) == 0);  // 7 is penalised: 0 * 2 = 0, tie -> lowest id
}

TEST_CASE("accept() rejects negative ids and leaves the history unchanged", "[sampling][penalties][sampler]") {
  const std::vector<float> logits{5.0f, 4.0f, 3.0f};
  Sampler sampler = greedy_with(2.0f, 0.0f, 0.0f, 64);
  ember::test::expect_invalid([&] { sampler.accept(-1); }, "token");
  ember::test::expect_invalid([&] { sampler.accept(std::vector<int32_t>{0, -5, 1}); }, "tokens[1]");
  CHECK(sampler.sample(logits) == 0);  // token 0 was not recorded by the failed batch
}
