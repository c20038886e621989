// metrics::Histogram against brute force over the raw samples: quantiles within the
// documented 10 % of the exact order statistic, exact single samples, merge equal to
// recording everything in one histogram, cumulative counts equal to counting.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/catch.hpp"
#include "common/expect_error.hpp"
#include "ember/error.hpp"
#include "metrics/histogram.hpp"

using namespace ember;
using metrics::Histogram;

namespace {

constexpr double kRelativeError = 0.10;  // documented quantile bound on the grid

// The order statistic x_k, k = floor(q (n-1)), of the samples (sorted ascending).
double order_statistic(const std::vector<double>& sorted, double q) {
  const auto k = static_cast<size_t>(std::floor(q * static_cast<double>(sorted.size() - 1)));
  return sorted[k];
}

uint64_t count_at_most(const std::vector<double>& values, double le) {
  return static_cast<uint64_t>(std::count_if(values.begin(), values.end(), [&](double v) { return v <= le; }));
}

// Checks every percentile 0..100 and a few extreme ones against the exact order statistic.
void check_quantiles(const Histogram& h, std::vector<double> values) {
  std::sort(values.begin(), values.end());
  std::vector<double> qs;
  for (int p = 0; p <= 100; ++p) qs.push_back(p / 100.0);
  for (double q : {0.001, 0.995, 0.999}) qs.push_back(q);
  for (double q : qs) {
    const double exact = order_statistic(values, q);
    const double estimate = h.quantile(q);
    INFO("q = " << q << " exact " << exact << " estimate " << estimate);
    CHECK(std::abs(estimate - exact) <= kRelativeError * exact);
  }
}

}  // namespace

TEST_CASE("the bucket grid spans 1e-5 s to 1e4 s in steps of at most 10 %", "[metrics][histogram]") {
  const auto bounds = Histogram::bucket_bounds();
  REQUIRE(bounds.size() == Histogram::kBoundCount);
  CHECK(bounds.front() == 1e-5);
  CHECK(bounds.back() == 1e4);
  for (size_t i = 1; i < bounds.size(); ++i) {
    INFO("bound " << i << " = " << bounds[i]);
    CHECK(bounds[i] > bounds[i - 1]);
    CHECK(bounds[i] / bounds[i - 1] <= 1.1 * (1 + 1e-12));
  }
  // Every default Prometheus bound is a grid bound, bit for bit.
  for (double le : Histogram::default_latency_bounds()) {
    INFO("le = " << le);
    CHECK(std::find(bounds.begin(), bounds.end(), le) != bounds.end());
  }
  const std::vector<double> expected = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                        0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0};
  CHECK(std::vector<double>(Histogram::default_latency_bounds().begin(), Histogram::default_latency_bounds().end()) ==
        expected);
}

TEST_CASE("an empty histogram reports zeros", "[metrics][histogram]") {
  Histogram h;
  CHECK(h.count() == 0);
  CHECK(h.sum() == 0.0);
  CHECK(h.mean() == 0.0);
  CHECK(h.min() == 0.0);
  CHECK(h.max() == 0.0);
  for (double q : {0.0, 0.5, 1.0}) CHECK(h.quantile(q) == 0.0);
  const std::vector<double> le = {0.001, 1.0};
  const auto cum = h.cumulative(le);
  REQUIRE(cum.size() == 3);
  CHECK(cum[0] == std::pair<double, uint64_t>(0.001, 0));
  CHECK(cum[1] == std::pair<double, uint64_t>(1.0, 0));
  CHECK(std::isinf(cum[2].first));
  CHECK(cum[2].second == 0);
}

TEST_CASE("a single sample is every quantile, exactly", "[metrics][histogram]") {
  // In a middle bucket, in the [0, 1e-5] bucket, and in the (1e4, inf) bucket.
  for (double v : {0.0123, 0.0025, 3e-6, 0.0, 2.5e4}) {
    Histogram h;
    h.record(v);
    INFO("value " << v);
    CHECK(h.count() == 1);
    CHECK(h.sum() == v);
    CHECK(h.mean() == v);
    CHECK(h.min() == v);
    CHECK(h.max() == v);
    for (double q : {0.0, 0.01, 0.5, 0.9, 0.99, 1.0}) CHECK(h.quantile(q) == v);
  }
}

TEST_CASE("quantiles of 1..1000 ms are within 10 % of the order statistic", "[metrics][histogram]") {
  std::vector<double> values;
  for (int i = 1; i <= 1000; ++i) values.push_back(i / 1000.0);
  std::shuffle(values.begin(), values.end(), std::mt19937_64(7));
  Histogram h;
  double sum = 0.0;
  for (double v : values) {
    h.record(v);
    sum += v;
  }
  CHECK(h.count() == 1000);
  CHECK(std::abs(h.sum() - 500.5) <= 1e-9);
  CHECK(std::abs(h.mean() - 0.5005) <= 1e-12);
  CHECK(h.sum() == sum);
  CHECK(h.min() == 0.001);
  CHECK(h.max() == 1.0);
  CHECK(h.quantile(0.0) == 0.001);
  CHECK(h.quantile(1.0) == 1.0);
  check_quantiles(h, values);
  // The p50/p90/p99 the Engine reports, against hand-computed order statistics
  // (k = floor(q * 999): 499 -> 0.5 s, 899 -> 0.9 s, 989 -> 0.99 s).
  CHECK(std::abs(h.quantile(0.5) - 0.500) <= 0.05);
  CHECK(std::abs(h.quantile(0.9) - 0.900) <= 0.09);
  CHECK(std::abs(h.quantile(0.99) - 0.990) <= 0.099);
}

TEST_CASE("quantiles of log-uniform samples over the whole grid stay within 10 %", "[metrics][histogram]") {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> exponent(-4.9, 3.9);  // 1.3e-5 s .. 7.9e3 s
  std::vector<double> values;
  Histogram h;
  for (int i = 0; i < 5000; ++i) {
    values.push_back(std::pow(10.0, exponent(rng)));
    h.record(values.back());
  }
  check_quantiles(h, values);
}

TEST_CASE("a clustered distribution keeps its tail", "[metrics][histogram]") {
  // 990 fast tokens at 20 ms and 10 slow ones at 2 s: p99 must see the slow ones.
  Histogram h;
  std::vector<double> values(990, 0.020);
  values.insert(values.end(), 10, 2.0);
  for (double v : values) h.record(v);
  check_quantiles(h, values);
  CHECK(h.quantile(0.5) == 0.020);  // its bucket (0.019, 0.02] narrowed to [min, ...] is exact
  CHECK(h.quantile(0.995) >= 1.9);   // in the bucket (1.9, 2.0] of the slow ones
  CHECK(h.quantile(0.995) <= 2.0);
}

TEST_CASE("NaN and infinities are ignored, negatives are recorded as 0", "[metrics][histogram]") {
  Histogram h;
  h.record(std::numeric_limits<double>::quiet_NaN());
  h.record(std::numeric_limits<double>::infinity());
  h.record(-std::numeric_limits<double>::infinity());
  CHECK(h.count() == 0);
  CHECK(h.sum() == 0.0);
  h.record(-0.5);
  CHECK(h.count() == 1);
  CHECK(h.sum() == 0.0);
  CHECK(h.min() == 0.0);
  CHECK(h.max() == 0.0);
  CHECK(h.quantile(0.5) == 0.0);
  h.record(0.25);
  CHECK(h.count() == 2);
  CHECK(h.sum() == 0.25);
  CHECK(h.min() == 0.0);
  CHECK(h.max() == 0.25);
}

TEST_CASE("merge equals recording both sets in one histogram", "[metrics][histogram]") {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> latency(std::log(0.05), 1.5);
  // Multiples of 2^-20 s so that sums are exact whatever the order of addition.
  auto draw = [&] { return std::round(latency(rng) * 1048576.0) / 1048576.0; };
  Histogram a, b, both;
  std::vector<double> all;
  for (int i = 0; i < 700; ++i) {
    const double v = draw();
    a.record(v);
    both.record(v);
    all.push_back(v);
  }
  for (int i = 0; i < 300; ++i) {
    const double v = draw();
    b.record(v);
    both.record(v);
    all.push_back(v);
  }
  Histogram merged = a;
  merged.merge(b);
  CHECK(merged.count() == both.count());
  CHECK(merged.sum() == both.sum());
  CHECK(merged.min() == both.min());
  CHECK(merged.max() == both.max());
  CHECK(merged.min() == *std::min_element(all.begin(), all.end()));
  CHECK(merged.max() == *std::max_element(all.begin(), all.end()));
  for (int p = 0; p <= 1000; ++p) CHECK(merged.quantile(p / 1000.0) == both.quantile(p / 1000.0));
  CHECK(merged.cumulative(Histogram::bucket_bounds()) == both.cumulative(Histogram::bucket_bounds()));
  check_quantiles(merged, all);

  // Merging into an empty histogram copies; merging an empty one changes nothing.
  Histogram empty;
  Histogram copy;
  copy.merge(a);
  CHECK(copy.cumulative(Histogram::bucket_bounds()) == a.cumulative(Histogram::bucket_bounds()));
  CHECK(copy.min() == a.min());
  CHECK(copy.max() == a.max());
  copy.merge(empty);
  CHECK(copy.count() == a.count());
  CHECK(copy.sum() == a.sum());

  // Self-merge doubles every count.
  Histogram twice = a;
  twice.merge(twice);
  CHECK(twice.count() == 2 * a.count());
  CHECK(twice.sum() == 2 * a.sum());
  const auto cum_a = a.cumulative(Histogram::default_latency_bounds());
  const auto cum_twice = twice.cumulative(Histogram::default_latency_bounds());
  for (size_t i = 0; i < cum_a.size(); ++i) CHECK(cum_twice[i].second == 2 * cum_a[i].second);
}

TEST_CASE("cumulative counts equal a brute-force count", "[metrics][histogram]") {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> exponent(-5.5, 2.2);  // 3 µs .. 158 s
  std::vector<double> values;
  for (int i = 0; i < 3000; ++i) values.push_back(std::pow(10.0, exponent(rng)));
  // Values exactly on bounds count as ≤ le (Prometheus semantics).
  for (double le : Histogram::default_latency_bounds()) values.push_back(le);
  values.push_back(0.0);
  Histogram h;
  for (double v : values) h.record(v);

  const auto cum = h.cumulative(Histogram::default_latency_bounds());
  REQUIRE(cum.size() == Histogram::default_latency_bounds().size() + 1);
  for (size_t i = 0; i + 1 < cum.size(); ++i) {
    INFO("le = " << cum[i].first);
    CHECK(cum[i].first == Histogram::default_latency_bounds()[i]);
    CHECK(cum[i].second == count_at_most(values, cum[i].first));
  }
  CHECK(std::isinf(cum.back().first));
  CHECK(cum.back().second == values.size());

  // Every grid bound is exact too.
  const auto fine = h.cumulative(Histogram::bucket_bounds());
  for (size_t i = 0; i < Histogram::kBoundCount; ++i) CHECK(fine[i].second == count_at_most(values, fine[i].first));

  // Off the grid: the count at the grid bound below (0.0031 -> 0.003); at or above
  // max() it is every value.
  const std::vector<double> off = {0.0031, 100.0, h.max(), 1e6};
  const auto cum_off = h.cumulative(off);
  CHECK(cum_off[0].second == count_at_most(values, 0.003));
  CHECK(cum_off[1].second == count_at_most(values, 100.0));
  CHECK(cum_off[2].second == values.size());
  CHECK(cum_off[3].second == values.size());
}

TEST_CASE("reset forgets everything", "[metrics][histogram]") {
  Histogram h;
  for (double v : {0.1, 0.2, 5.0}) h.record(v);
  h.reset();
  CHECK(h.count() == 0);
  CHECK(h.sum() == 0.0);
  CHECK(h.quantile(0.5) == 0.0);
  CHECK(h.cumulative(Histogram::default_latency_bounds()).back().second == 0);
  h.record(0.3);
  CHECK(h.min() == 0.3);
  CHECK(h.max() == 0.3);
  CHECK(h.quantile(0.5) == 0.3);
}

TEST_CASE("bad quantile and bound arguments throw invalid_argument", "[metrics][histogram]") {
  Histogram h;
  h.record(0.1);
  test::expect_error([&] { h.quantile(1.5); }, ErrorCode::invalid_argument, "q = 1.5");
  test::expect_error([&] { h.quantile(-0.1); }, ErrorCode::invalid_argument, "q = -0.1");
  test::expect_error([&] { h.quantile(std::numeric_limits<double>::quiet_NaN()); }, ErrorCode::invalid_argument,
                     "q = nan");
  const std::vector<double> unsorted = {0.1, 0.05};
  test::expect_error([&] { h.cumulative(unsorted); }, ErrorCode::invalid_argument, "bound 1 = 0.05");
  const std::vector<double> repeated = {0.1, 0.1};
  test::expect_error([&] { h.cumulative(repeated); }, ErrorCode::invalid_argument, "bound 1 = 0.1");
  const std::vector<double> infinite = {0.1, std::numeric_limits<double>::infinity()};
  test::expect_error([&] { h.cumulative(infinite); }, ErrorCode::invalid_argument, "bound 1 = inf");
}
