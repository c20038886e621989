// The truncation filters of the sampling chain: top-k, top-p (nucleus) and min-p.
//
// Each removes candidates in place and never empties a non-empty set: the
// highest-ranked candidate always survives. Probabilities are taken at temperature
// 1 and renormalised over the candidates present when the filter runs. Every
// filter leaves the candidates in an order that depends only on its input (rank
// order, the previous order, or a fixed permutation of it), so the result of a
// chain is the same on every platform.
#pragma once

#include <cstddef>

#include "sampling/candidates.hpp"

namespace ember::sampling {

// Keeps the k highest-ranked candidates, in rank order. Exactly min(k, n)
// survive; among candidates with equal logits at the cut the lower ids are kept.
// k = 0 (off) or k >= n leaves the set unchanged. Throws invalid_argument for k < 0.
// Cost: O(n) selection plus O(k log k) for sorting the survivors.
void apply_top_k(Candidates& c, int k);

// Keeps the shortest rank-order prefix whose probability sums to >= p (the token
// that reaches p is kept). p >= 1 (off) leaves the set unchanged. Throws
// invalid_argument unless 0 < p <= 1.
// Sorted input is walked from the top. Unsorted input (no top-k before) is not
// sorted: a weighted quickselect of ours partitions around pivots and keeps the
// side that holds the crossing point, O(n) expected. The survivors come out in rank
// order when there are at most kTopPSortLimit of them, otherwise in the order the
// partitioning left them, which depends only on the input (no std:: algorithm with
// unspecified order is involved), so the draw that follows is reproducible.
void apply_top_p(Candidates& c, float p);
inline constexpr size_t kTopPSortLimit = 4096;

// Keeps the candidates whose probability is >= min_p times the largest one, i.e.
// exp(logit - max_logit) >= min_p with exp_nonpositive() (exp.hpp); order is kept.
// min_p = 0 (off) leaves the set unchanged, min_p = 1 keeps the candidates tied
// with the maximum. Throws invalid_argument unless 0 <= min_p <= 1.
void apply_min_p(Candidates& c, float min_p);

// The same result as fill_candidates() followed by apply_min_p(min_p), for
// 0 < min_p <= 1, in id order. Two passes over the logits (checks and maximum,
// then the threshold, skipping blocks of 16 that lie clearly below it) that store
// only the survivors. Throws like fill_candidates() and apply_min_p().
void fill_min_p_candidates(std::span<const float> logits, float min_p, Candidates& out);

}  // namespace ember::sampling
