// A latency histogram with fixed log-spaced buckets: constant memory, O(log B)
// record, mergeable, with quantile estimates of bounded relative error. The batching
// Engine keeps one per latency metric (time to first token, inter-token gap, ...);
// values are in seconds throughout.
//
// Bucket grid: bounds m × 10^e seconds for e = -5..3 and the 32 mantissas
//   1.0 1.1 1.2 1.3 1.4 1.5 1.6 1.7 1.8 1.9 2.0 2.2 2.4 2.5 2.7 2.9
//   3.0 3.3 3.6 3.9 4.2 4.6 5.0 5.5 6.0 6.5 7.0 7.5 8.0 8.5 9.0 9.5
// plus the closing bound 1e4 s: 289 bounds from 1e-5 s (10 µs) to 1e4 s (2.8 h).
// Buckets are upper-inclusive like Prometheus' `le`: bucket 0 is [0, 1e-5],
// bucket i is (bound[i-1], bound[i]], the last one is (1e4, +inf). Adjacent bounds
// differ by at most 10 % (b/a ≤ 1.1). Each bound is the double nearest its decimal
// value, so the decimal bounds 0.0025, 0.005, 30, 60 ... of default_latency_bounds()
// are grid bounds exactly and cumulative() is exact for them.
//
// Quantile error: quantile(q) lies in the bucket that holds the order statistic
// x_k, k = floor(q·(n-1)) (0-based, samples sorted ascending), so for
// 1e-5 s < x_k ≤ 1e4 s the relative error |estimate - x_k| / x_k is at most 10 %.
// Below 1e-5 s the absolute error is at most 1e-5 s; above 1e4 s the estimate lies
// in [1e4 s, max()].
//
// Not thread-safe: concurrent record() calls on one Histogram race. The owner (the
// Engine) serialises access with its own lock.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace ember::metrics {

class Histogram {
 public:
  static constexpr int kBucketsPerDecade = 32;
  static constexpr int kDecades = 9;                                  // 1e-5 s .. 1e4 s
  static constexpr size_t kBoundCount = kBucketsPerDecade * kDecades + 1;  // 289 grid bounds
  static constexpr size_t kBucketCount = kBoundCount + 1;             // + the (1e4, +inf) bucket

  // Records one value in seconds. NaN and ±inf are ignored (not counted); a finite
  // negative value (a clock step backwards) is recorded as 0.
  void record(double value);

  uint64_t count() const { return count_; }  // values recorded
  double sum() const { return sum_; }        // their sum, seconds
  double min() const { return min_; }        // smallest value, seconds; 0 when empty
  double max() const { return max_; }        // largest value, seconds; 0 when empty
  double mean() const;                       // sum / count, seconds; 0 when empty

  // Estimate of the q-quantile, seconds (error bound in the file comment). q in
  // [0, 1], else throws ember::Error(invalid_argument). 0 when empty; q = 0 gives
  // min() and q = 1 gives max() exactly. Interpolates linearly within the bucket,
  // whose ends are clamped to [min(), max()], so a single sample returns itself.
  double quantile(double q) const;

  // Adds every value recorded in `other` (same result as recording them here).
  void merge(const Histogram& other);
  // Forgets every value.
  void reset();

  // Prometheus-style cumulative counts: one (le, number of values ≤ le) pair per
  // entry of `upper_bounds` (seconds, finite, strictly increasing, else throws
  // invalid_argument), then (+inf, count()). Exact when le is a grid bound (see
  // bucket_bounds()) or le ≥ max(); otherwise it counts the values ≤ the largest
  // grid bound below le (values in the bucket straddling le are left out).
  std::vector<std::pair<double, uint64_t>> cumulative(std::span<const double> upper_bounds) const;

  // {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60} s;
  // every one is a grid bound.
  static std::span<const double> default_latency_bounds();
  // The kBoundCount grid bounds, seconds, ascending (bucket i ends at bound i).
  static std::span<const double> bucket_bounds();

 private:
  std::array<uint64_t, kBucketCount> buckets_{};  // values per bucket
  uint64_t count_ = 0;
  double sum_ = 0.0;
  double min_ = 0.0;  // valid when count_ > 0
  double max_ = 0.0;  // valid when count_ > 0
};

}  // namespace ember::metrics
