// The working set of one sample() call: the tokens still allowed, with their logits.
//
// Ranking rule used by every filter and by greedy: higher logit first; among equal
// logits, lower token id first. Token ids are distinct, so this is a strict total
// order and any sort by it has exactly one result on every platform.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace ember::sampling {

struct Candidate {
  int32_t id;   // token id, index into the logits row
  float logit;  // finite (after penalties)
};

// True when `a` ranks before `b` (see the ranking rule above).
inline bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// A candidate with its weight exp(logit - max_logit); working storage of top-p.
// Weights everywhere in the sampler come from exp_nonpositive() (exp.hpp).
struct WeightedCandidate {
  Candidate candidate;
  float weight;
};

struct Candidates {
  std::vector<Candidate> items;  // surviving tokens: in id order until a filter reorders them
  bool sorted = false;           // items are in rank order
  // Largest logit among items when known, NaN otherwise. Set by the fill functions;
  // it stays valid through the filters, which never remove the top candidate.
  float top_logit = std::numeric_limits<float>::quiet_NaN();
  std::vector<WeightedCandidate> scratch;  // working storage of the filters; contents unspecified
  std::vector<float> weights;              // working storage of the filters; contents unspecified
};

// Checks a logits row: non-empty, at most INT32_MAX entries, no NaN, no +inf.
// Throws ember::Error(invalid_argument) naming the first offending index.
void check_logits(std::span<const float> logits);
// Checks only the size part of check_logits().
void check_logits_size(std::span<const float> logits);

// Fills `out` with every token whose logit is finite, in id order (-inf tokens are
// impossible and dropped). Checks the row as check_logits() does, and throws when
// every logit is -inf. Reuses out's storage.
void fill_candidates(std::span<const float> logits, Candidates& out);

// The same result as fill_candidates() followed by apply_top_k(k) (filters.hpp) for
// k > 0: the k best tokens in rank order. One pass over the logits that keeps the
// k best seen so far in a heap, so the cost is O(n) plus O(k log k log(n / k))
// expected, without building the full candidate set.
void fill_top_candidates(std::span<const float> logits, int k, Candidates& out);

// The largest logit of a row, after the checks of fill_candidates() (size, no NaN,
// no +inf, not all -inf).
float checked_max(std::span<const float> logits);

// Index of the highest logit, the first one on ties. Checks the row as
// fill_candidates() does (so an all -inf row throws).
int32_t argmax(std::span<const float> logits);

// The largest and smallest values of a logits row (-inf and +inf for an empty row)
// and whether it holds a NaN; +inf shows as the maximum, -inf as the minimum.
// summarize_logits() uses SSE2 where available, summarize_logits_scalar() is the
// plain loop it must agree with.
struct RowSummary {
  float max;
  float min;
  bool has_nan;
};
RowSummary summarize_logits(std::span<const float> logits);
RowSummary summarize_logits_scalar(std::span<const float> logits);

// Largest logit among the candidates (c.top_logit when known); `c` must not be empty.
float max_logit(const Candidates& c);

}  // namespace ember::sampling
