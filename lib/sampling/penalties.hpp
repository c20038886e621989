// Repetition, frequency and presence penalties, and the token window they look at.
//
// For every token t that occurs count(t) > 0 times in the window, in this order:
//   repetition (CTRL, Keskar et al. 2019): logit > 0 ? logit / r : logit * r
//   frequency and presence (the OpenAI API's definitions):
//                                          logit -= count(t) * frequency + presence
// Tokens outside the window are untouched, bit for bit. A -inf logit stays -inf;
// results that overflow are clamped to +-FLT_MAX, so a penalty never turns a
// possible token into an impossible one or the other way round.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

namespace ember::sampling {

struct TokenCount {
  int32_t token;  // token id, >= 0
  int32_t count;  // occurrences in the window, >= 1
};

struct PenaltyParams {
  float repetition = 1.0f;  // > 0; 1 = off
  float frequency = 0.0f;   // logit units per occurrence; 0 = off
  float presence = 0.0f;    // logit units; 0 = off

  // True when applying the penalties can change a logit.
  bool active() const { return repetition != 1.0f || frequency != 0.0f || presence != 0.0f; }
};

// Applies the penalties to logits[t] for every (t, count) in `counts`. Every token
// must be < logits.size() and appear once in `counts` (TokenHistory guarantees it).
// NaN and +inf logits are left as they are, for the caller's validation to reject.
void apply_penalties(std::span<float> logits, std::span<const TokenCount> counts, const PenaltyParams& params);

// The last `window` accepted tokens and how often each occurs among them.
class TokenHistory {
 public:
  // window > 0: the most recent `window` tokens; -1: every token; 0: none.
  explicit TokenHistory(int window = 0) : window_(window) {}

  void push(int32_t token);
  void clear();

  // One entry per distinct token in the window, in no particular order.
  std::span<const TokenCount> counts() const { return counts_; }
  // Largest token id in the window, or -1 when it is empty.
  int32_t max_token() const;
  // Number of tokens in the window, repeats included.
  size_t size() const { return size_; }

 private:
  void add(int32_t token, int32_t delta);

  int window_;
  size_t size_ = 0;
  std::deque<int32_t> recent_;                   // the window, oldest first (only when window_ > 0)
  std::vector<TokenCount> counts_;               // distinct tokens of the window
  std::unordered_map<int32_t, size_t> position_;  // token -> index into counts_
};

}  // namespace ember::sampling
