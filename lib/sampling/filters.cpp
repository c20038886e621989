#include "sampling/filters.hpp"

#include <algorithm>
#include <cmath>

#include "common/fail.hpp"
#include "sampling/exp.hpp"

#if defined(__SSE2__) || defined(_M_X64)
#include <emmintrin.h>
#define EMBER_SAMPLING_SSE2 1
#endif

namespace ember::sampling {

namespace {

using Weighted = WeightedCandidate;

// top-p looks first at the head: the candidates whose logit is within this many
// units of the maximum (weight >= e^-10). The split is made on logits, not on
// weights, so that the head is exactly a rank-order prefix.
constexpr float kTopPHeadLogits = 10.0f;

// Ranges at most this long are finished by sorting and walking.
constexpr size_t kSortRange = 16;

bool weighted_before(const Weighted& a, const Weighted& b) { return ranks_before(a.candidate, b.candidate); }

// Index of the median, by rank, of entries[a], entries[b], entries[c].
size_t median_of_three(std::span<const Weighted> entries, size_t a, size_t b, size_t c) {
  const auto before = [&](size_t x, size_t y) { return weighted_before(entries[x], entries[y]); };
  if (before(a, b)) {
    if (before(b, c)) return b;
    return before(a, c) ? c : a;
  }
  if (before(a, c)) return a;
  return before(b, c) ? c : b;
}

// Weighted quickselect for top-p. `entries` holds the candidates in any order with
// their weights; finds the first position, in rank order, at which the running
// weight reaches `target`, and permutes `entries` so that entries[0, result] are
// exactly the candidates ranked up to and including it. Returns that position.
//
// Invariant: everything in [0, lo) ranks before everything in [lo, hi), which ranks
// before everything in [hi, n); `need` is target minus the weight of [0, lo).
size_t select_nucleus(std::span<Weighted> entries, double target) {
  size_t lo = 0;
  size_t hi = entries.size();
  double need = target;
  // Like introselect: after about 2 log2(n) rounds the rest is sorted instead, which
  // bounds the worst case at O(n log n).
  int rounds_left = 8;
  for (size_t n = hi; n > 1; n >>= 1) rounds_left += 2;
  while (hi - lo > kSortRange && rounds_left-- > 0) {
    // Median-of-three pivot, parked at hi - 1 for a Lomuto partition.
    const size_t pivot_at = median_of_three(entries, lo, lo + (hi - lo) / 2, hi - 1);
    std::swap(entries[pivot_at], entries[hi - 1]);
    const Weighted pivot = entries[hi - 1];
    // Branch-free Lomuto partition (the comparison is a coin flip for the branch
    // predictor): [lo, store) rank before the pivot, [store, i) after it. When
    // entries[i] ranks after, the swap exchanges two entries that both rank after.
    const Candidate key = pivot.candidate;
    size_t store = lo;
    double mass_before = 0.0;  // weight of the entries that rank before the pivot
    for (size_t i = lo; i + 1 < hi; ++i) {
      const Weighted entry = entries[i];
      const bool before = (entry.candidate.logit > key.logit) |
                          ((entry.candidate.logit == key.logit) & (entry.candidate.id < key.id));
      entries[i] = entries[store];
      entries[store] = entry;
      mass_before += before ? static_cast<double>(entry.weight) : 0.0;
      store += before;
    }
    std::swap(entries[store], entries[hi - 1]);
    if (mass_before >= need) {
      hi = store;  // reached before the pivot
    } else if (mass_before + pivot.weight >= need) {
      return store;  // the pivot is the crossing token
    } else {
      need -= mass_before + pivot.weight;
      lo = store + 1;
    }
  }
  std::sort(entries.begin() + static_cast<std::ptrdiff_t>(lo), entries.begin() + static_cast<std::ptrdiff_t>(hi),
            weighted_before);
  double running = 0.0;
  for (size_t i = lo; i < hi; ++i) {
    running += entries[i].weight;
    if (running >= need) return i;
  }
  // Only when rounding leaves the range's sum just below `need`: keep the whole range.
  return hi - 1;
}

// top-p over candidates already in rank order with their weights: walk from the top.
size_t sorted_nucleus_size(std::span<const float> weights, double target) {
  double running = 0.0;
  for (size_t i = 0; i < weights.size(); ++i) {
    running += weights[i];
    if (running >= target) return i + 1;
  }
  return weights.size();  // rounding kept the sum just below the target
}

// weights[i] = exp(items[i].logit - max) for the candidates, through the
// vectorised exp_nonpositive().
std::span<float> fill_weights(const Candidates& c, float max, std::vector<float>& storage) {
  const size_t n = c.items.size();
  if (storage.size() < n) storage.resize(n);
  const std::span<float> weights(storage.data(), n);
  for (size_t i = 0; i < n; ++i) weights[i] = c.items[i].logit - max;
  exp_nonpositive(weights);
  return weights;
}

// The min-p test on one logit: p_i / p_max = exp(logit - max) >= min_p, with the
// same exponential as everywhere else so that no libm result decides a token.
inline bool passes_min_p(float logit, float max, float min_p) { return exp_nonpositive(logit - max) >= min_p; }

}  // namespace

void apply_top_k(Candidates& c, int k) {
  require(k >= 0, "sampler: top_k must be >= 0, got {}", k);
  const size_t n = c.items.size();
  if (k == 0 || static_cast<size_t>(k) >= n) return;
  const auto cut = c.items.begin() + k;
  if (!c.sorted) {
    std::nth_element(c.items.begin(), cut, c.items.end(), ranks_before);
    std::sort(c.items.begin(), cut, ranks_before);
  }
  c.items.erase(cut, c.items.end());
  c.sorted = true;
}

void apply_top_p(Candidates& c, float p) {
  require(p > 0.0f && p <= 1.0f, "sampler: top_p must be in (0, 1], got {}", p);
  const size_t n = c.items.size();
  if (p >= 1.0f || n <= 1) return;

  // Weights exp(logit - max) at temperature 1 in float; sums in double.
  const float max = max_logit(c);
  const std::span<const float> weights = fill_weights(c, max, c.weights);
  if (c.sorted) {
    double total = 0.0;
    for (const float weight : weights) total += weight;
    c.items.resize(sorted_nucleus_size(weights, static_cast<double>(p) * total));
    return;
  }

  // Head candidates (logit >= max - kTopPHeadLogits) fill `entries` from the front, the
  // tail from the back. The head ranks before every tail candidate, so when the head
  // alone reaches the target the nucleus lies inside it and the tail (most of a real
  // vocabulary) is dropped before the selection. The result is the same either way
  // (up to the last bit of the partial sums, which is fixed for a given input).
  // (The scratch vectors only grow: shrinking and regrowing would zero-fill them.)
  std::vector<Weighted>& entries = c.scratch;
  if (entries.size() < n) entries.resize(n);
  size_t head = 0;
  size_t tail = n;
  double total = 0.0;
  double head_mass = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const float weight = weights[i];
    total += weight;
    if (c.items[i].logit - max >= -kTopPHeadLogits) {
      head_mass += weight;
      entries[head++] = {c.items[i], weight};
    } else {
      entries[--tail] = {c.items[i], weight};
    }
  }
  const double target = static_cast<double>(p) * total;
  const size_t examined = head_mass >= target ? head : n;
  const size_t kept = select_nucleus(std::span<Weighted>(entries.data(), examined), target) + 1;
  if (kept <= kTopPSortLimit) {
    std::sort(entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(kept), weighted_before);
    c.sorted = true;
  }
  c.items.resize(kept);
  for (size_t i = 0; i < kept; ++i) c.items[i] = entries[i].candidate;
}

void apply_min_p(Candidates& c, float min_p) {
  require(min_p >= 0.0f && min_p <= 1.0f, "sampler: min_p must be in [0, 1], got {}", min_p);
  if (min_p == 0.0f || c.items.size() <= 1) return;
  // p_i / p_max = exp(logit_i - max) >= min_p. A stable compaction keeps the order
  // of the survivors, so rank order (if any) is preserved.
  const std::span<const float> weights = fill_weights(c, max_logit(c), c.weights);
  size_t kept = 0;
  for (size_t i = 0; i < c.items.size(); ++i) {
    if (weights[i] >= min_p) c.items[kept++] = c.items[i];
  }
  c.items.resize(kept);
}

void fill_min_p_candidates(std::span<const float> logits, float min_p, Candidates& out) {
  require(min_p > 0.0f && min_p <= 1.0f, "sampler: min_p must be in (0, 1] here, got {}", min_p);
  const float max = checked_max(logits);
  out.items.clear();
  out.sorted = false;
  out.top_logit = max;
  const float* data = logits.data();
  const size_t n = logits.size();
  size_t i = 0;
#if defined(EMBER_SAMPLING_SSE2)
  // Blocks of 16 entirely below a float bound that lies safely under every passing
  // logit (max + ln(min_p), less a margin far above the error of the exponential
  // and of float rounding) are skipped; the rest get the exact test.
  const double bound = static_cast<double>(max) + std::log(static_cast<double>(min_p)) - 1e-3 -
                       1e-6 * std::abs(static_cast<double>(max));
  const __m128 coarse = _mm_set1_ps(std::nextafter(static_cast<float>(bound), -HUGE_VALF));
  for (; i + 16 <= n; i += 16) {
    const __m128 hits = _mm_or_ps(
        _mm_or_ps(_mm_cmpge_ps(_mm_loadu_ps(data + i), coarse), _mm_cmpge_ps(_mm_loadu_ps(data + i + 4), coarse)),
        _mm_or_ps(_mm_cmpge_ps(_mm_loadu_ps(data + i + 8), coarse), _mm_cmpge_ps(_mm_loadu_ps(data + i + 12), coarse)));
    if (_mm_movemask_ps(hits) == 0) continue;
    for (size_t j = i; j < i + 16; ++j)
      if (passes_min_p(data[j], max, min_p)) out.items.push_back({static_cast<int32_t>(j), data[j]});
  }
#endif
  for (; i < n; ++i)
    if (passes_min_p(data[i], max, min_p)) out.items.push_back({static_cast<int32_t>(i), data[i]});
}

}  // namespace ember::sampling
