// Statistical tests: with fixed seeds and 200,000 draws, the sampled frequencies
// match the distribution the chain should produce (Pearson chi-square at
// alpha = 0.001), and filtered-out tokens never appear.
//
// Seeds are fixed, so each test gives the same verdict on every run; a correct
// sampler fails a given case with probability 0.001 over the choice of seed.
#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "common/catch.hpp"
#include "ember/sampler.hpp"
#include "tests/sampling/chi_square.hpp"
#include "tests/sampling/helpers.hpp"

using ember::Sampler;
using ember::SamplerOptions;
using ember::test::chi_square_critical;
using ember::test::chi_square_statistic;
using ember::test::chi_square_survival;

namespace {

constexpr int kDraws = 200000;
constexpr double kAlpha = 0.001;

SamplerOptions no_filters(float temperature, uint64_t seed) {
  SamplerOptions options;
  options.temperature = temperature;
  options.top_k = 0;
  options.top_p = 1.0f;
  options.min_p = 0.0f;
  options.seed = seed;
  return options;
}

std::vector<int64_t> histogram(Sampler& sampler, const std::vector<float>& logits, int draws) {
  std::vector<int64_t> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) ++counts[static_cast<size_t>(sampler.sample(logits))];
  return counts;
}

// Probabilities proportional to exp(logit / T) over `keep`, zero elsewhere.
std::vector<double> softmax_over(const std::vector<double>& logits, double temperature, const std::set<int>& keep) {
  std::vector<double> probs(logits.size(), 0.0);
  double total = 0.0;
  for (int i : keep) total += probs[i] = std::exp(logits[i] / temperature);
  for (double& p : probs) p /= total;
  return probs;
}

// Probabilities proportional to p^(1 / T) over `keep`: temperature applied to a
// distribution given as probabilities (logits = ln p).
std::vector<double> tempered(const std::vector<double>& p, double temperature, const std::set<int>& keep) {
  std::vector<double> logs;
  for (double v : p) logs.push_back(std::log(v));
  return softmax_over(logs, temperature, keep);
}

std::set<int> all_of(size_t n) {
  std::set<int> ids;
  for (size_t i = 0; i < n; ++i) ids.insert(static_cast<int>(i));
  return ids;
}

std::vector<float> as_float(const std::vector<double>& values) { return {values.begin(), values.end()}; }

// Asserts that `counts` fits `probs`: no draw where the probability is 0, and the
// chi-square statistic over the rest below the alpha = 0.001 critical value.
void check_fit(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  int cells = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] == 0.0) {
      INFO("token " << i << " was filtered out");
      CHECK(counts[i] == 0);
    } else {
      ++cells;
      INFO("token " << i << " expected count " << probs[i] * kDraws);
      REQUIRE(probs[i] * kDraws >= 5.0);  // the chi-square approximation needs it
    }
  }
  const int df = cells - 1;
  const double statistic = chi_square_statistic(counts, probs);
  const double critical = chi_square_critical(df, kAlpha);
  INFO("chi-square " << statistic << " with " << df << " degrees of freedom, critical value " << critical
                     << ", p-value " << chi_square_survival(statistic, df));
  CHECK(statistic < critical);
}

}  // namespace

TEST_CASE("chi-square critical values match the published table", "[sampling][statistics]") {
  // Upper 0.001 points of the chi-square distribution (standard tables, 3 decimals).
  CHECK(chi_square_critical(1, 0.001) == Approx(10.828).margin(1e-3));
  CHECK(chi_square_critical(2, 0.001) == Approx(13.816).margin(1e-3));
  CHECK(chi_square_critical(3, 0.001) == Approx(16.266).margin(1e-3));
  CHECK(chi_square_critical(4, 0.001) == Approx(18.467).margin(1e-3));
  CHECK(chi_square_critical(7, 0.001) == Approx(24.322).margin(1e-3));
  CHECK(chi_square_critical(10, 0.001) == Approx(29.588).margin(1e-3));
  CHECK(chi_square_critical(30, 0.001) == Approx(59.703).margin(1e-3));
  // And a 0.05 point, to exercise the other branch of the gamma function.
  CHECK(chi_square_critical(1, 0.05) == Approx(3.841).margin(1e-3));
  CHECK(chi_square_critical(10, 0.05) == Approx(18.307).margin(1e-3));
}

TEST_CASE("temperature alone: frequencies follow softmax(logits / T)", "[sampling][statistics]") {
  const std::vector<double> logits{1.0, 0.2, -0.5, 2.0, 0.0, -1.0, 1.5, 0.7};
  Sampler sampler(no_filters(0.7f, 1001));
  const auto counts = histogram(sampler, as_float(logits), kDraws);
  check_fit(counts, softmax_over(logits, 0.7, all_of(logits.size())));

  // The test has power: the same counts reject temperature 1.
  const auto wrong = softmax_over(logits, 1.0, all_of(logits.size()));
  CHECK(chi_square_statistic(counts, wrong) > 10 * chi_square_critical(7, kAlpha));
}

TEST_CASE("temperature above 1 flattens the distribution", "[sampling][statistics]") {
  const std::vector<double> logits{1.0, 0.2, -0.5, 2.0, 0.0, -1.0, 1.5, 0.7};
  Sampler sampler(no_filters(2.5f, 1002));
  check_fit(histogram(sampler, as_float(logits), kDraws), softmax_over(logits, 2.5, all_of(logits.size())));
}

TEST_CASE("top-k then temperature: only the k best, renormalised", "[sampling][statistics]") {
  const std::vector<double> logits{1.0, 0.2, -0.5, 2.0, 0.0, -1.0, 1.5, 0.7};
  SamplerOptions options = no_filters(1.5f, 1003);
  options.top_k = 3;
  Sampler sampler(options);
  check_fit(histogram(sampler, as_float(logits), kDraws), softmax_over(logits, 1.5, {3, 6, 0}));
}

TEST_CASE("top-p then temperature: the nucleus, renormalised", "[sampling][statistics]") {
  // Rank order 0 (.30), 4 (.25), 2 (.20), 5 (.08), 6 (.06), 1 (.05), 7 (.04), 3 (.02);
  // running sums .30 .55 .75 .83: p = 0.8 keeps {0, 4, 2, 5}.
  const std::vector<double> p{0.30, 0.05, 0.20, 0.02, 0.25, 0.08, 0.06, 0.04};
  SamplerOptions options = no_filters(0.6f, 1004);
  options.top_p = 0.8f;
  Sampler sampler(options);
  check_fit(histogram(sampler, ember::test::log_of(p), kDraws), tempered(p, 0.6, {0, 4, 2, 5}));
}

TEST_CASE("min-p then temperature: tokens above min_p * p_max, renormalised", "[sampling][statistics]") {
  // min_p = 0.3 of p_max = 0.30 is 0.09: keeps .30 .25 .20, drops .08 and below.
  const std::vector<double> p{0.30, 0.05, 0.20, 0.02, 0.25, 0.08, 0.06, 0.04};
  SamplerOptions options = no_filters(2.0f, 1005);
  options.min_p = 0.3f;
  Sampler sampler(options);
  check_fit(histogram(sampler, ember::test::log_of(p), kDraws), tempered(p, 2.0, {0, 4, 2}));
}

TEST_CASE("the whole chain: penalties, top-k, top-p, min-p, temperature", "[sampling][statistics]") {
  //                        0    1    2    3    4    5    6    7     8     9
  const std::vector<float> logits{3.0f, 2.5f, 2.0f, 1.8f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f};
  SamplerOptions options;
  options.temperature = 0.8f;
  options.top_k = 5;
  options.top_p = 0.85f;
  options.min_p = 0.4f;
  options.repetition_penalty = 1.5f;
  options.frequency_penalty = 0.25f;
  options.presence_penalty = 0.5f;
  options.penalty_last_n = 3;
  options.seed = 1006;
  Sampler sampler(options);
  sampler.accept(std::vector<int32_t>{9, 0, 1, 0});  // window {0, 1, 0}: 9 has left it
  // Penalties: token 0: 3 / 1.5 - (2 * 0.25 + 0.5) = 1.0; token 1: 2.5 / 1.5 - 0.75 = 0.917.
  // Ranking: 2 (2.0), 3 (1.8), 4 (1.5), 0 (1.0), 5 (1.0), 1 (0.917), 6, 7, 8, 9.
  // top-k 5 keeps 2 3 4 0 5 (0 before 5 on the tie); at T = 1 they have p = .316
  // .259 .192 .116 .116, running sums .316 .575 .767 .884: top-p 0.85 drops 5.
  // min-p 0.4: p_0 / p_max = e^-1 = 0.37 < 0.4 drops 0. Left: 2, 3, 4 at T = 0.8.
  const std::vector<double> penalised{1.0, 2.5 / 1.5 - 0.75, 2.0, 1.8, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0};
  check_fit(histogram(sampler, logits, kDraws), softmax_over(penalised, 0.8, {2, 3, 4}));
}

TEST_CASE("successive draws are independent", "[sampling][statistics]") {
  // Two equally likely tokens: the kDraws / 2 non-overlapping pairs of successive
  // draws fall in the four cells 00 01 10 11 with probability 1/4 each.
  Sampler sampler(no_filters(1.0f, 1007));
  const std::vector<float> logits{0.0f, 0.0f};
  std::vector<int64_t> pairs(4, 0);
  for (int i = 0; i < kDraws / 2; ++i) {
    const int32_t first = sampler.sample(logits);
    const int32_t second = sampler.sample(logits);
    ++pairs[static_cast<size_t>(first * 2 + second)];
  }
  const std::vector<double> quarter(4, 0.25);
  CHECK(chi_square_statistic(pairs, quarter) < chi_square_critical(3, kAlpha));
}

TEST_CASE("default options on a 262144-token vocabulary draw only from the survivors", "[sampling][statistics]") {
  // Defaults: top-k 40, top-p 0.95, min-p 0.05, T 0.8. The survivor set is computed
  // here by a full sort; every draw must fall in it, and most of it must turn up.
  std::mt19937 engine(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(262144);
  for (float& v : logits) v = normal(engine);

  std::vector<int32_t> ranking(logits.size());
  for (size_t i = 0; i < ranking.size(); ++i) ranking[i] = static_cast<int32_t>(i);
  std::partial_sort(ranking.begin(), ranking.begin() + 40, ranking.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const double max = logits[ranking[0]];
  double total = 0.0;
  for (int i = 0; i < 40; ++i) total += std::exp(logits[ranking[i]] - max);
  std::set<int32_t> survivors;
  double running = 0.0;
  for (int i = 0; i < 40 && running < 0.95 * total; ++i) {
    const double weight = std::exp(logits[ranking[i]] - max);
    running += weight;
    if (weight >= 0.05) survivors.insert(ranking[i]);  // min-p relative to the best (weight 1)
  }
  REQUIRE(survivors.size() >= 5);

  SamplerOptions options;
  options.seed = 1008;
  Sampler sampler(options);
  std::set<int32_t> seen;
  for (int i = 0; i < 400; ++i) {
    const int32_t token = sampler.sample(logits);
    INFO("draw " << i << " gave token " << token);
    REQUIRE(survivors.count(token) == 1);
    seen.insert(token);
  }
  CHECK(seen.size() >= survivors.size() / 2);
}
