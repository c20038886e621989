#include "sampling/candidates.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/fail.hpp"

#if defined(__SSE2__) || defined(_M_X64)
#include <emmintrin.h>
#define EMBER_SAMPLING_SSE2 1
#endif

namespace ember::sampling {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// True for the values a logits row must not contain.
inline bool is_bad(float v) { return std::isnan(v) || v == kInf; }

// Raised on the first NaN or +inf; kept out of line so the scanning loops stay small.
[[noreturn]] void bad_logit(size_t index, float value) {
  fail(ErrorCode::invalid_argument, "sampler: logits[{}] is {}; logits must be finite or -inf", index,
       std::isnan(value) ? "NaN" : "+inf");
}

// Reports the first NaN or +inf of a row known to contain one.
[[noreturn]] void report_first_bad(std::span<const float> logits) {
  for (size_t i = 0; i < logits.size(); ++i)
    if (is_bad(logits[i])) bad_logit(i, logits[i]);
  fail(ErrorCode::internal, "sampler: a NaN or +inf logit was detected but not found again");
}

[[noreturn]] void all_impossible(size_t size) {
  fail(ErrorCode::invalid_argument, "sampler: all {} logits are -inf; no token can be picked", size);
}

}  // namespace

RowSummary summarize_logits_scalar(std::span<const float> logits) {
  RowSummary summary{-kInf, kInf, false};
  for (const float v : logits) {
    summary.max = v > summary.max ? v : summary.max;
    summary.min = v < summary.min ? v : summary.min;
    summary.has_nan |= std::isnan(v);
  }
  return summary;
}

RowSummary summarize_logits(std::span<const float> logits) {
#if defined(EMBER_SAMPLING_SSE2)
  // SSE2 is part of every x86-64 CPU. Two independent accumulators of each kind hide
  // the latency of maxps/minps; both return their second operand (the accumulator)
  // when the first is NaN, so NaNs are tracked by cmpunordps.
  const float* data = logits.data();
  const size_t n = logits.size();
  __m128 max0 = _mm_set1_ps(-kInf), max1 = max0;
  __m128 min0 = _mm_set1_ps(kInf), min1 = min0;
  __m128 nan = _mm_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128 a = _mm_loadu_ps(data + i);
    const __m128 b = _mm_loadu_ps(data + i + 4);
    max0 = _mm_max_ps(a, max0);
    max1 = _mm_max_ps(b, max1);
    min0 = _mm_min_ps(a, min0);
    min1 = _mm_min_ps(b, min1);
    nan = _mm_or_ps(nan, _mm_cmpunord_ps(a, b));
  }
  alignas(16) float maxima[8];
  alignas(16) float minima[8];
  _mm_store_ps(maxima, max0);
  _mm_store_ps(maxima + 4, max1);
  _mm_store_ps(minima, min0);
  _mm_store_ps(minima + 4, min1);
  RowSummary summary = summarize_logits_scalar(logits.subspan(i));
  for (const float v : maxima) summary.max = v > summary.max ? v : summary.max;
  for (const float v : minima) summary.min = v < summary.min ? v : summary.min;
  summary.has_nan |= _mm_movemask_ps(nan) != 0;
  return summary;
#else
  return summarize_logits_scalar(logits);
#endif
}

void check_logits_size(std::span<const float> logits) {
  require(!logits.empty(), "sampler: logits is empty; expected one value per vocabulary entry");
  require(logits.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
          "sampler: logits has {} entries, more than token ids can address", logits.size());
}

void check_logits(std::span<const float> logits) {
  check_logits_size(logits);
  const RowSummary summary = summarize_logits(logits);
  if (summary.has_nan || summary.max == kInf) report_first_bad(logits);
}

void fill_candidates(std::span<const float> logits, Candidates& out) {
  check_logits_size(logits);
  const RowSummary summary = summarize_logits(logits);
  if (summary.has_nan || summary.max == kInf) report_first_bad(logits);
  if (summary.max == -kInf) all_impossible(logits.size());
  out.items.resize(logits.size());
  out.sorted = false;
  out.top_logit = summary.max;
  Candidate* dest = out.items.data();
  if (summary.min > -kInf) {
    // No impossible token: a plain copy with ids.
    for (size_t i = 0; i < logits.size(); ++i) dest[i] = {static_cast<int32_t>(i), logits[i]};
    return;
  }
  size_t kept = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    dest[kept] = {static_cast<int32_t>(i), logits[i]};
    kept += logits[i] != -kInf;  // branch-free: a -inf entry is overwritten by the next one
  }
  out.items.resize(kept);
}

void fill_top_candidates(std::span<const float> logits, int k, Candidates& out) {
  check_logits_size(logits);
  require(k > 0, "sampler: top_k must be > 0 here, got {}", k);
  const size_t capacity = std::min(static_cast<size_t>(k), logits.size());
  std::vector<Candidate>& heap = out.items;
  heap.clear();
  heap.reserve(capacity);
  out.sorted = false;
  out.top_logit = std::numeric_limits<float>::quiet_NaN();
  // A max-heap under ranks_before: its front is the worst of the best seen so far.
  // A later token with a logit equal to the front's ranks after it (higher id), so
  // only a strictly greater logit can enter a full heap.
  float threshold = -kInf;
  bool bad = false;
  const auto consider = [&](size_t i, float v) {
    if (v > threshold) {
      bad |= v == kInf;
      const Candidate candidate{static_cast<int32_t>(i), v};
      if (heap.size() == capacity) {
        std::pop_heap(heap.begin(), heap.end(), ranks_before);
        heap.back() = candidate;
      } else {
        heap.push_back(candidate);
      }
      std::push_heap(heap.begin(), heap.end(), ranks_before);
      if (heap.size() == capacity) threshold = heap.front().logit;
    } else {
      bad |= std::isnan(v);
    }
  };

  const float* data = logits.data();
  const size_t n = logits.size();
  size_t i = 0;
#if defined(EMBER_SAMPLING_SSE2)
  // Once the heap is full almost no logit beats the threshold: test 16 at a time
  // and look at single values only in blocks where one does (or holds a NaN).
  for (; i + 16 <= n; i += 16) {
    const __m128 t = _mm_set1_ps(threshold);
    const __m128 a = _mm_loadu_ps(data + i);
    const __m128 b = _mm_loadu_ps(data + i + 4);
    const __m128 c = _mm_loadu_ps(data + i + 8);
    const __m128 d = _mm_loadu_ps(data + i + 12);
    const __m128 above = _mm_or_ps(_mm_or_ps(_mm_cmpgt_ps(a, t), _mm_cmpgt_ps(b, t)),
                                   _mm_or_ps(_mm_cmpgt_ps(c, t), _mm_cmpgt_ps(d, t)));
    const __m128 nan = _mm_or_ps(_mm_cmpunord_ps(a, b), _mm_cmpunord_ps(c, d));
    if (_mm_movemask_ps(_mm_or_ps(above, nan)) == 0) continue;
    for (size_t j = i; j < i + 16; ++j) consider(j, data[j]);
  }
#endif
  for (; i < n; ++i) consider(i, data[i]);

  if (bad) report_first_bad(logits);
  if (heap.empty()) all_impossible(logits.size());
  std::sort(heap.begin(), heap.end(), ranks_before);
  out.sorted = true;
  out.top_logit = heap.front().logit;
}

float checked_max(std::span<const float> logits) {
  check_logits_size(logits);
  const RowSummary summary = summarize_logits(logits);
  if (summary.has_nan || summary.max == kInf) report_first_bad(logits);
  if (summary.max == -kInf) all_impossible(logits.size());
  return summary.max;
}

int32_t argmax(std::span<const float> logits) {
  const float max = checked_max(logits);
  // The first index holding the maximum.
  const auto found = std::find(logits.begin(), logits.end(), max);
  return static_cast<int32_t>(found - logits.begin());
}

float max_logit(const Candidates& c) {
  if (c.sorted) return c.items.front().logit;
  if (!std::isnan(c.top_logit)) return c.top_logit;
  float best = -kInf;
  for (const Candidate& candidate : c.items) best = candidate.logit > best ? candidate.logit : best;
  return best;
}

}  // namespace ember::sampling
