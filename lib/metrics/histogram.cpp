// Histogram: bucket grid construction, recording, quantiles and the cumulative view.
#include "metrics/histogram.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include "common/fail.hpp"

namespace ember::metrics {

namespace {

// Mantissas of one decade in tenths (10 = 1.0, 25 = 2.5); adjacent ratio ≤ 1.1.
constexpr std::array<int, Histogram::kBucketsPerDecade> kMantissaTenths = {
    10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22, 24, 25, 27, 29,
    30, 33, 36, 39, 42, 46, 50, 55, 60, 65, 70, 75, 80, 85, 90, 95};
constexpr int kFirstExponent = -5;  // first bound 1.0e-5 s

// The double nearest `tenths` × 10^(exponent-1), parsed from its decimal spelling so
// that it equals the C++ literal of the same value bit for bit.
double decimal_bound(int tenths, int exponent) {
  const std::string text = fmt::format("{}e{}", tenths, exponent - 1);
  double value = 0.0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

const std::array<double, Histogram::kBoundCount>& grid() {
  static const std::array<double, Histogram::kBoundCount> bounds = [] {
    std::array<double, Histogram::kBoundCount> b{};
    size_t i = 0;
    for (int d = 0; d < Histogram::kDecades; ++d)
      for (int m : kMantissaTenths) b[i++] = decimal_bound(m, kFirstExponent + d);
    b[i] = decimal_bound(10, kFirstExponent + Histogram::kDecades);  // 1e4
    return b;
  }();
  return bounds;
}

constexpr std::array<double, 15> kDefaultLatencyBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                          0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0};

}  // namespace

void Histogram::record(double value) {
  if (!std::isfinite(value)) return;
  value = std::max(value, 0.0);
  const auto& bounds = grid();
  // First bound ≥ value: buckets are (bound[i-1], bound[i]].
  const size_t bucket = static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
  ++buckets_[bucket];
  if (count_ == 0) {
    min_ = max_ = value;
  } else {
    min_ = std::min(min_, value);
    max_ = std::max(max_, value);
  }
  ++count_;
  sum_ += value;
}

double Histogram::mean() const { return count_ == 0 ? 0.0 : sum_ / static_cast<double>(count_); }

double Histogram::quantile(double q) const {
  require(q >= 0.0 && q <= 1.0, "quantile: q = {} is outside [0, 1]", q);
  if (count_ == 0) return 0.0;
  if (q == 0.0) return min_;
  if (q == 1.0) return max_;
  const auto& bounds = grid();
  const double rank = q * static_cast<double>(count_ - 1);  // 0-based, fractional
  uint64_t before = 0;                                      // values in earlier buckets
  for (size_t b = 0; b < kBucketCount; ++b) {
    const uint64_t in_bucket = buckets_[b];
    if (in_bucket == 0 || rank >= static_cast<double>(before + in_bucket)) {
      before += in_bucket;
      continue;
    }
    // The bucket's value range, narrowed to what was actually seen.
    const double lower = std::max(b == 0 ? 0.0 : bounds[b - 1], min_);
    const double upper = std::min(b < kBoundCount ? bounds[b] : max_, max_);
    // Treat the bucket's values as spread evenly, the j-th at fraction (j + 0.5) / n.
    const double fraction =
        std::clamp((rank - static_cast<double>(before) + 0.5) / static_cast<double>(in_bucket), 0.0, 1.0);
    return std::clamp(lower + fraction * (upper - lower), lower, upper);
  }
  return max_;  // unreachable: rank < count_
}

void Histogram::merge(const Histogram& other) {
  if (other.count_ == 0) return;
  for (size_t b = 0; b < kBucketCount; ++b) buckets_[b] += other.buckets_[b];
  if (count_ == 0) {
    min_ = other.min_;
    max_ = other.max_;
  } else {
    min_ = std::min(min_, other.min_);
    max_ = std::max(max_, other.max_);
  }
  count_ += other.count_;
  sum_ += other.sum_;
}

void Histogram::reset() { *this = Histogram(); }

std::vector<std::pair<double, uint64_t>> Histogram::cumulative(std::span<const double> upper_bounds) const {
  for (size_t i = 0; i < upper_bounds.size(); ++i) {
    require(std::isfinite(upper_bounds[i]), "cumulative: bound {} = {} is not finite", i, upper_bounds[i]);
    require(i == 0 || upper_bounds[i] > upper_bounds[i - 1],
            "cumulative: bound {} = {} does not exceed the previous bound {}", i, upper_bounds[i],
            i == 0 ? 0.0 : upper_bounds[i - 1]);
  }
  const auto& bounds = grid();
  std::vector<std::pair<double, uint64_t>> out;
  out.reserve(upper_bounds.size() + 1);
  size_t next_bucket = 0;  // buckets [0, next_bucket) are summed into `below`
  uint64_t below = 0;
  for (double le : upper_bounds) {
    if (count_ > 0 && le >= max_) {
      out.emplace_back(le, count_);
      continue;
    }
    // Buckets entirely ≤ le are those whose upper bound (grid bound b) is ≤ le.
    const size_t whole = static_cast<size_t>(std::upper_bound(bounds.begin(), bounds.end(), le) - bounds.begin());
    for (; next_bucket < whole; ++next_bucket) below += buckets_[next_bucket];
    out.emplace_back(le, below);
  }
  out.emplace_back(std::numeric_limits<double>::infinity(), count_);
  return out;
}

std::span<const double> Histogram::default_latency_bounds() { return kDefaultLatencyBounds; }

std::span<const double> Histogram::bucket_bounds() { return grid(); }

}  // namespace ember::metrics
