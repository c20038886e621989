// Each filter on hand-built distributions: exactly which candidates survive, in
// which order, and the tie rules.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/catch.hpp"
#include "sampling/draw.hpp"
#include "sampling/filters.hpp"
#include "tests/sampling/helpers.hpp"

using ember::sampling::apply_min_p;
using ember::sampling::apply_top_k;
using ember::sampling::apply_top_p;
using ember::sampling::Candidates;
using ember::test::candidates_of;
using ember::test::expect_invalid;
using ember::test::ids_of;
using ember::test::log_of;
using Ids = std::vector<int32_t>;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Logits of a large vocabulary, reproducible: normal(0, sd) from a fixed seed.
// (std::normal_distribution is implementation-defined, but these tests compare the
// filters with a reference computed from the same numbers, so any values do.)
std::vector<float> random_logits(size_t n, float sd, unsigned seed) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal(0.0f, sd);
  std::vector<float> logits(n);
  for (float& v : logits) v = normal(engine);
  return logits;
}

// All ids in rank order (logit descending, id ascending), by a full sort.
Ids full_ranking(const std::vector<float>& logits) {
  Ids ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  return ids;
}

}  // namespace

TEST_CASE("fill_candidates keeps every finite logit in id order and drops -inf", "[sampling][filters]") {
  const Candidates c = candidates_of({kNegInf, 1.0f, kNegInf, 0.0f, -3.5f});
  CHECK(ids_of(c) == Ids{1, 3, 4});
  CHECK(c.items[2].logit == -3.5f);
  CHECK_FALSE(c.sorted);
}

TEST_CASE("summarize_logits agrees with the scalar loop", "[sampling][filters]") {
  using ember::sampling::summarize_logits;
  using ember::sampling::summarize_logits_scalar;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> base = random_logits(1000, 2.0f, 23);
  // Every length from 1 to 70 (all SIMD/tail splits), with a NaN, +inf or -inf
  // planted at each position, and none.
  for (size_t n = 1; n <= 70; ++n) {
    const std::vector<float> row(base.begin(), base.begin() + static_cast<long>(n));
    for (const float planted : {0.0f, nan, inf, -inf, 100.0f}) {
      for (size_t at = 0; at < n; at += (planted == 0.0f ? n : 1)) {
        std::vector<float> x = row;
        if (planted != 0.0f) x[at] = planted;
        const auto fast = summarize_logits(x);
        const auto slow = summarize_logits_scalar(x);
        INFO("n = " << n << ", planted " << planted << " at " << at);
        REQUIRE(fast.has_nan == slow.has_nan);
        REQUIRE(fast.has_nan == std::isnan(planted));
        REQUIRE(fast.max == slow.max);
        float expected_max = -inf;  // the largest non-NaN value
        for (float v : x) expected_max = std::isnan(v) ? expected_max : std::max(expected_max, v);
        REQUIRE(fast.max == expected_max);
        float expected_min = inf;  // the smallest non-NaN value
        for (float v : x) expected_min = std::isnan(v) ? expected_min : std::min(expected_min, v);
        REQUIRE(fast.min == expected_min);
        REQUIRE(slow.min == expected_min);
      }
    }
  }
  const std::vector<float> all_neg_inf(37, -inf);
  CHECK(summarize_logits(all_neg_inf).max == -inf);
  CHECK(summarize_logits(all_neg_inf).min == -inf);
  CHECK_FALSE(summarize_logits(all_neg_inf).has_nan);
}

TEST_CASE("top-k keeps the k best candidates in rank order", "[sampling][filters][top_k]") {
  Candidates c = candidates_of({1.0f, 3.0f, 2.0f, 5.0f, 4.0f});
  apply_top_k(c, 3);
  CHECK(ids_of(c) == Ids{3, 4, 1});
  CHECK(c.sorted);

  Candidates one = candidates_of({1.0f, 3.0f, 2.0f, 5.0f, 4.0f});
  apply_top_k(one, 1);
  CHECK(ids_of(one) == Ids{3});
}

TEST_CASE("top-k keeps exactly k candidates; ties at the cut go to the lower ids", "[sampling][filters][top_k]") {
  //                               0     1     2     3     4     5
  const std::vector<float> logits{2.0f, 5.0f, 2.0f, 7.0f, 2.0f, 1.0f};
  Candidates c3 = candidates_of(logits);
  apply_top_k(c3, 3);
  CHECK(ids_of(c3) == Ids{3, 1, 0});
  Candidates c4 = candidates_of(logits);
  apply_top_k(c4, 4);
  CHECK(ids_of(c4) == Ids{3, 1, 0, 2});
  Candidates c5 = candidates_of(logits);
  apply_top_k(c5, 5);
  CHECK(ids_of(c5) == Ids{3, 1, 0, 2, 4});

  // All equal: the k lowest ids.
  Candidates flat = candidates_of(std::vector<float>(10, 0.5f));
  apply_top_k(flat, 4);
  CHECK(ids_of(flat) == Ids{0, 1, 2, 3});
}

TEST_CASE("top-k = 0 or k >= n leaves the candidates untouched", "[sampling][filters][top_k]") {
  const std::vector<float> logits{1.0f, 3.0f, 2.0f};
  for (int k : {0, 3, 4, 1000}) {
    Candidates c = candidates_of(logits);
    apply_top_k(c, k);
    INFO("k = " << k);
    CHECK(ids_of(c) == Ids{0, 1, 2});
    CHECK_FALSE(c.sorted);
  }
}

TEST_CASE("top-k over a 262144-token vocabulary equals a full sort", "[sampling][filters][top_k]") {
  const std::vector<float> logits = random_logits(262144, 2.0f, 7);
  const Ids ranking = full_ranking(logits);
  for (int k : {1, 40, 1000}) {
    Candidates c = candidates_of(logits);
    apply_top_k(c, k);
    INFO("k = " << k);
    CHECK(ids_of(c) == Ids(ranking.begin(), ranking.begin() + k));
  }
}

TEST_CASE("top-k rejects a negative k", "[sampling][filters][top_k]") {
  Candidates c = candidates_of({1.0f, 2.0f});
  expect_invalid([&] { apply_top_k(c, -1); }, "top_k");
  CHECK(ids_of(c) == Ids{0, 1});
}

TEST_CASE("fill_top_candidates equals fill_candidates then top-k", "[sampling][filters][top_k]") {
  const auto two_step = [](const std::vector<float>& logits, int k) {
    Candidates c = candidates_of(logits);
    apply_top_k(c, k);
    return ids_of(c);
  };
  const auto fused = [](const std::vector<float>& logits, int k) {
    Candidates c;
    ember::sampling::fill_top_candidates(logits, k, c);
    CHECK(c.sorted);
    return ids_of(c);
  };
  const std::vector<float> ties{2.0f, 5.0f, 2.0f, 7.0f, 2.0f, 1.0f, kNegInf, 2.0f};
  for (int k = 1; k <= 9; ++k) {
    INFO("k = " << k);
    Ids expected = two_step(ties, k);
    if (static_cast<size_t>(k) >= 7) std::sort(expected.begin(), expected.end(), [&](int32_t a, int32_t b) {
        return ties[a] > ties[b] || (ties[a] == ties[b] && a < b);
      });  // k >= n leaves the two-step result unsorted; the fused one is always sorted
    CHECK(fused(ties, k) == expected);
  }
  CHECK(fused(ties, 3) == Ids{3, 1, 0});

  const std::vector<float> big = random_logits(262144, 2.0f, 17);
  for (int k : {1, 40, 5000}) {
    INFO("k = " << k);
    CHECK(fused(big, k) == two_step(big, k));
  }
  // Ascending logits: every token enters the heap and pushes out the worst.
  std::vector<float> rising(10000);
  for (size_t i = 0; i < rising.size(); ++i) rising[i] = static_cast<float>(i) * 0.01f;
  CHECK(fused(rising, 3) == Ids{9999, 9998, 9997});
}

TEST_CASE("fill_top_candidates rejects bad rows like fill_candidates", "[sampling][filters][top_k]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  Candidates c;
  expect_invalid([&] { ember::sampling::fill_top_candidates({}, 3, c); }, "logits is empty");
  expect_invalid([&] { ember::sampling::fill_top_candidates(std::vector<float>{9.0f, 1.0f, nan}, 1, c); },
                 "logits[2] is NaN");
  expect_invalid([&] { ember::sampling::fill_top_candidates(std::vector<float>{1.0f, inf}, 1, c); },
                 "logits[1] is +inf");
  expect_invalid([&] { ember::sampling::fill_top_candidates(std::vector<float>{kNegInf, kNegInf}, 2, c); },
                 "all 2 logits are -inf");
  expect_invalid([&] { ember::sampling::fill_top_candidates(std::vector<float>{1.0f}, 0, c); }, "top_k");
}

TEST_CASE("top-p keeps the smallest prefix reaching p, the crossing token included", "[sampling][filters][top_p]") {
  // Probabilities by id: 0.1, 0.4, 0.2, 0.3; rank order 1, 3, 2, 0; running sums 0.4, 0.7, 0.9, 1.0.
  const std::vector<float> logits = log_of({0.1, 0.4, 0.2, 0.3});
  const auto kept = [&](float p) {
    Candidates c = candidates_of(logits);
    apply_top_p(c, p);
    CHECK(c.sorted);
    return ids_of(c);
  };
  CHECK(kept(0.05f) == Ids{1});
  CHECK(kept(0.35f) == Ids{1});
  CHECK(kept(0.45f) == Ids{1, 3});  // 0.4 < 0.45: the token that crosses (0.3) is kept
  CHECK(kept(0.65f) == Ids{1, 3});
  CHECK(kept(0.75f) == Ids{1, 3, 2});
  CHECK(kept(0.85f) == Ids{1, 3, 2});
  CHECK(kept(0.95f) == Ids{1, 3, 2, 0});
}

TEST_CASE("top-p: a running sum equal to p stops the prefix (>=, not >)", "[sampling][filters][top_p]") {
  // Four equal logits: every weight is exactly 1, so the sums 1, 2, 3 hit p * 4 exactly.
  const std::vector<float> flat(4, 0.0f);
  const auto kept = [&](float p) {
    Candidates c = candidates_of(flat);
    apply_top_p(c, p);
    return ids_of(c);
  };
  CHECK(kept(0.25f) == Ids{0});
  CHECK(kept(0.5f) == Ids{0, 1});
  CHECK(kept(0.75f) == Ids{0, 1, 2});
  CHECK(kept(0.76f) == Ids{0, 1, 2, 3});
}

TEST_CASE("top-p = 1 leaves the candidates untouched", "[sampling][filters][top_p]") {
  Candidates c = candidates_of(log_of({0.1, 0.4, 0.2, 0.3}));
  apply_top_p(c, 1.0f);
  CHECK(ids_of(c) == Ids{0, 1, 2, 3});
  CHECK_FALSE(c.sorted);
}

TEST_CASE("top-p after top-k uses probabilities renormalised over the survivors", "[sampling][filters][top_p]") {
  // 0.4, 0.3, 0.2, 0.1 -> after top-k 2: 4/7 = 0.571 and 3/7.
  const std::vector<float> logits = log_of({0.4, 0.3, 0.2, 0.1});
  Candidates alone = candidates_of(logits);
  apply_top_p(alone, 0.55f);
  CHECK(ids_of(alone) == Ids{0, 1});  // 0.4 < 0.55 of the full distribution

  Candidates after_k = candidates_of(logits);
  apply_top_k(after_k, 2);
  apply_top_p(after_k, 0.55f);
  CHECK(ids_of(after_k) == Ids{0});  // 4/7 >= 0.55 of the renormalised one
}

TEST_CASE("top-p ignores -inf tokens and handles a single candidate", "[sampling][filters][top_p]") {
  Candidates c = candidates_of({kNegInf, 2.0f, kNegInf});
  apply_top_p(c, 0.5f);
  CHECK(ids_of(c) == Ids{1});
}

// The reference nucleus: full sort, running sum in double of double exponentials.
Ids reference_nucleus(const std::vector<float>& logits, float p) {
  const Ids ranking = full_ranking(logits);
  const double max = logits[ranking[0]];
  double total = 0.0;
  for (float v : logits) total += std::exp(v - max);
  size_t size = 0;
  double running = 0.0;
  while (running < p * total) running += std::exp(logits[ranking[size++]] - max);
  return Ids(ranking.begin(), ranking.begin() + static_cast<long>(size));
}

TEST_CASE("top-p over a 262144-token vocabulary equals a full sort and running sum", "[sampling][filters][top_p]") {
  // sd 3 puts hundreds to tens of thousands of tokens in the nucleus, on both sides
  // of kTopPSortLimit; sd 0.5 makes it nearly flat.
  for (const float sd : {3.0f, 0.5f}) {
    const std::vector<float> logits = random_logits(262144, sd, 11);
    for (const float p : {0.001f, 0.1f, 0.5f, 0.9f, 0.99f}) {
      const Ids expected = reference_nucleus(logits, p);
      Candidates c = candidates_of(logits);
      apply_top_p(c, p);
      INFO("sd = " << sd << ", p = " << p << ", expected nucleus of " << expected.size());
      REQUIRE(c.items.size() == expected.size());
      if (expected.size() <= ember::sampling::kTopPSortLimit) {
        CHECK(c.sorted);
        CHECK(ids_of(c) == expected);
      } else {
        CHECK_FALSE(c.sorted);
        Ids got = ids_of(c), want = expected;
        std::sort(got.begin(), got.end());
        std::sort(want.begin(), want.end());
        CHECK(got == want);
      }
    }
  }
}

TEST_CASE("top-p on a flat 262144-token vocabulary keeps the lowest ids", "[sampling][filters][top_p]") {
  // All weights are 1 and every running sum is an exact integer: p = 0.5 keeps
  // exactly 131072 tokens, ids 0 .. 131071 by the tie rule.
  const std::vector<float> flat(262144, -1.5f);
  Candidates c = candidates_of(flat);
  apply_top_p(c, 0.5f);
  Ids got = ids_of(c);
  std::sort(got.begin(), got.end());
  REQUIRE(got.size() == 131072);
  CHECK(got.front() == 0);
  CHECK(got.back() == 131071);
}

TEST_CASE("top-p output order depends only on the input", "[sampling][filters][top_p]") {
  // Large nuclei come out unsorted; the order must be reproducible (the draw
  // depends on it): the same input twice gives the same order.
  const std::vector<float> logits = random_logits(100000, 0.5f, 9);
  Candidates a = candidates_of(logits), b = candidates_of(logits);
  apply_top_p(a, 0.7f);
  apply_top_p(b, 0.7f);
  REQUIRE(a.items.size() > ember::sampling::kTopPSortLimit);
  CHECK(ids_of(a) == ids_of(b));
}

TEST_CASE("top-p gives the same set on sorted and unsorted input", "[sampling][filters][top_p]") {
  const std::vector<float> logits = random_logits(5000, 1.0f, 3);
  Candidates unsorted = candidates_of(logits);
  apply_top_p(unsorted, 0.8f);
  Candidates sorted = candidates_of(logits);
  apply_top_k(sorted, 4999);  // sorts and drops only the worst token
  REQUIRE(sorted.sorted);
  apply_top_p(sorted, 0.8f);
  CHECK(ids_of(sorted) == ids_of(unsorted));
  CHECK(unsorted.items.size() > 100);  // a real nucleus, not a single token
}

TEST_CASE("top-p rejects p outside (0, 1]", "[sampling][filters][top_p]") {
  for (float p : {0.0f, -0.1f, 1.01f, std::numeric_limits<float>::quiet_NaN()}) {
    Candidates c = candidates_of({1.0f, 2.0f});
    INFO("p = " << p);
    expect_invalid([&] { apply_top_p(c, p); }, "top_p");
  }
}

TEST_CASE("min-p keeps tokens with p >= min_p * p_max, in their order", "[sampling][filters][min_p]") {
  // Probabilities by id: 0.5, 0.2, 0.05, 0.15, 0.1.
  const std::vector<float> logits = log_of({0.5, 0.2, 0.05, 0.15, 0.1});
  const auto kept = [&](float min_p) {
    Candidates c = candidates_of(logits);
    apply_min_p(c, min_p);
    CHECK_FALSE(c.sorted);
    return ids_of(c);
  };
  CHECK(kept(0.05f) == Ids{0, 1, 2, 3, 4});  // threshold 0.025
  CHECK(kept(0.15f) == Ids{0, 1, 3, 4});     // threshold 0.075: 0.05 goes
  CHECK(kept(0.25f) == Ids{0, 1, 3});        // threshold 0.125
  CHECK(kept(0.35f) == Ids{0, 1});           // threshold 0.175
  CHECK(kept(0.5f) == Ids{0});               // threshold 0.25
  CHECK(kept(0.0f) == Ids{0, 1, 2, 3, 4});   // off
}

TEST_CASE("min-p is relative to the largest probability, not absolute", "[sampling][filters][min_p]") {
  // Eleven equal tokens have p = 1/11 each: an absolute threshold of 0.5 would drop
  // them all, a relative one keeps them all.
  Candidates flat = candidates_of(std::vector<float>(11, 1.0f));
  apply_min_p(flat, 0.5f);
  CHECK(flat.items.size() == 11);

  // min_p = 1 keeps exactly the tokens tied with the maximum (p == p_max passes).
  Candidates ties = candidates_of({3.0f, 1.0f, 3.0f, 2.9f});
  apply_min_p(ties, 1.0f);
  CHECK(ids_of(ties) == Ids{0, 2});
}

TEST_CASE("min-p keeps rank order when the input is sorted", "[sampling][filters][min_p]") {
  Candidates c = candidates_of(log_of({0.1, 0.4, 0.2, 0.3}));
  apply_top_k(c, 4 - 1);  // 1, 3, 2 in rank order
  apply_min_p(c, 0.6f);   // threshold 0.24: 0.2 goes
  CHECK(ids_of(c) == Ids{1, 3});
  CHECK(c.sorted);
}

TEST_CASE("fill_min_p_candidates equals fill_candidates then min-p", "[sampling][filters][min_p]") {
  const auto two_step = [](const std::vector<float>& logits, float min_p) {
    Candidates c = candidates_of(logits);
    apply_min_p(c, min_p);
    return ids_of(c);
  };
  const auto fused = [](const std::vector<float>& logits, float min_p) {
    Candidates c;
    ember::sampling::fill_min_p_candidates(logits, min_p, c);
    CHECK_FALSE(c.sorted);
    return ids_of(c);
  };
  const std::vector<float> small = log_of({0.5, 0.2, 0.05, 0.15, 0.1});
  CHECK(fused(small, 0.25f) == Ids{0, 1, 3});
  CHECK(fused(std::vector<float>{3.0f, kNegInf, 3.0f, 2.9f}, 1.0f) == Ids{0, 2});
  for (const float sd : {0.3f, 2.0f, 10.0f}) {
    std::vector<float> big = random_logits(262144 + 7, sd, 29);  // a tail after the 16-wide blocks
    for (size_t i = 0; i < big.size(); i += 1000) big[i] = kNegInf;
    for (const float min_p : {1e-6f, 0.01f, 0.05f, 0.5f, 1.0f}) {
      INFO("sd = " << sd << ", min_p = " << min_p);
      const Ids expected = two_step(big, min_p);
      CHECK(fused(big, min_p) == expected);
    }
  }
  // The max sits in the tail (after the last full block of 16).
  std::vector<float> tail_max(40, 0.0f);
  tail_max[39] = 5.0f;
  tail_max[5] = 4.5f;
  CHECK(fused(tail_max, 0.5f) == Ids{5, 39});
}

TEST_CASE("fill_min_p_candidates rejects bad rows", "[sampling][filters][min_p]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Candidates c;
  expect_invalid([&] { ember::sampling::fill_min_p_candidates({}, 0.1f, c); }, "logits is empty");
  expect_invalid([&] { ember::sampling::fill_min_p_candidates(std::vector<float>{0.0f, nan}, 0.1f, c); },
                 "logits[1] is NaN");
  expect_invalid([&] { ember::sampling::fill_min_p_candidates(std::vector<float>(3, kNegInf), 0.1f, c); },
                 "all 3 logits are -inf");
  for (const float min_p : {0.0f, -0.5f, 1.5f}) {
    INFO("min_p = " << min_p);
    expect_invalid([&] { ember::sampling::fill_min_p_candidates(std::vector<float>{1.0f}, min_p, c); }, "min_p");
  }
}

TEST_CASE("min-p rejects values outside [0, 1]", "[sampling][filters][min_p]") {
  for (float min_p : {-0.01f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    Candidates c = candidates_of({1.0f, 2.0f});
    INFO("min_p = " << min_p);
    expect_invalid([&] { apply_min_p(c, min_p); }, "min_p");
  }
}

TEST_CASE("probabilities() applies the temperature", "[sampling][draw]") {
  // Logits ln 1, ln 2, ln 3: p proportional to 1, 2, 3 at T = 1 and to 1, 4, 9 at T = 0.5.
  const Candidates c = candidates_of(log_of({1.0, 2.0, 3.0}));
  const std::vector<double> t1 = ember::sampling::probabilities(c, 1.0f);
  REQUIRE(t1.size() == 3);
  CHECK(t1[0] == Approx(1.0 / 6).epsilon(1e-6));
  CHECK(t1[1] == Approx(2.0 / 6).epsilon(1e-6));
  CHECK(t1[2] == Approx(3.0 / 6).epsilon(1e-6));
  const std::vector<double> t05 = ember::sampling::probabilities(c, 0.5f);
  CHECK(t05[0] == Approx(1.0 / 14).epsilon(1e-6));
  CHECK(t05[1] == Approx(4.0 / 14).epsilon(1e-6));
  CHECK(t05[2] == Approx(9.0 / 14).epsilon(1e-6));
  const std::vector<double> t2 = ember::sampling::probabilities(c, 2.0f);
  const double sum = 1.0 + std::sqrt(2.0) + std::sqrt(3.0);
  CHECK(t2[2] == Approx(std::sqrt(3.0) / sum).epsilon(1e-6));
}

TEST_CASE("draw_index inverts the cumulative distribution", "[sampling][draw]") {
  // Four equal logits have weights exactly 1, so the index is floor(4u) exactly.
  const Candidates flat = candidates_of(std::vector<float>(4, 0.0f));
  std::vector<float> storage;
  const auto draw = [&](const Candidates& c, double u) { return ember::sampling::draw_index(c, 1.0f, u, storage); };
  CHECK(draw(flat, 0.0) == 0);
  CHECK(draw(flat, 0.2499999) == 0);
  CHECK(draw(flat, 0.25) == 1);  // the boundary belongs to the next token: target < cumulative
  CHECK(draw(flat, 0.5) == 2);
  CHECK(draw(flat, 0.7500001) == 3);
  CHECK(draw(flat, std::nextafter(1.0, 0.0)) == 3);

  // 1 : 2 : 3 at T = 1.
  const Candidates c = candidates_of(log_of({1.0, 2.0, 3.0}));
  CHECK(draw(c, 0.16) == 0);
  CHECK(draw(c, 0.17) == 1);
  CHECK(draw(c, 0.49) == 1);
  CHECK(draw(c, 0.51) == 2);

  // A weight that underflows to 0 is never drawn, even at the very top of [0, 1).
  const Candidates tiny = candidates_of({0.0f, -200.0f});
  CHECK(draw(tiny, std::nextafter(1.0, 0.0)) == 0);
  const Candidates tiny_first = candidates_of({-200.0f, 0.0f});
  CHECK(draw(tiny_first, 0.0) == 1);
}
