// Speculative decoding inside ember: draft sources, the adaptive draft-length
// policy, and the verification loop that drives a Generation (the same resumable
// loop as plain generation; see ember/speculative.hpp for the contract).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "ember/speculative.hpp"
#include "runtime/generation.hpp"
#include "runtime/sequence.hpp"

namespace ember::runtime {

// Proposes up to k tokens to follow `context`. Drafts are deterministic: the same
// context gives the same proposal, which is what makes verification lossless.
class DraftSource {
 public:
  virtual ~DraftSource() = default;
  virtual std::vector<int32_t> draft(std::span<const int32_t> context, int32_t k) = 0;
  // Seconds the last draft() spent bringing a draft model's cache up to the context
  // (the prompt, or the tokens taken while drafting was paused) before drafting.
  // A one-time cost, not a cost per drafted token: the policy leaves it out.
  double catch_up_seconds() const { return catch_up_seconds_; }
  // True when draft() costs next to nothing (prompt lookup): while drafting is paused,
  // the policy then keeps asking it and scores its first draft against the token
  // each plain step picks, to resume as soon as the drafts would pass again.
  virtual bool free() const { return false; }

 protected:
  double catch_up_seconds_ = 0.0;
};

// Checks `options` (invalid_argument naming the field; the draft model's vocabulary
// against the target's) and makes its source (nullptr for kind none). `target` is
// the session's model; `context` the most tokens its sequence holds.
std::unique_ptr<DraftSource> make_draft_source(const SpeculativeOptions& options, const Model& target,
                                               int64_t context);

// Prompt lookup: the tokens that followed the most recent earlier occurrence of
// the context's last n tokens, n from max_ngram down to min_ngram.
std::vector<int32_t> lookup_draft(std::span<const int32_t> context, int32_t k, int32_t max_ngram, int32_t min_ngram);

// How many tokens to draft next, from what the steps so far measured.
class DraftPolicy {
 public:
  explicit DraftPolicy(const SpeculativeOptions& options);
  // 0: take a plain step (no drafts).
  int32_t next_k() const;
  void after_verify(int32_t drafted, int32_t accepted, double draft_seconds, double verify_seconds);
  void after_plain(double seconds);
  // While paused, with a free draft source: whether its first draft was the token
  // a plain step picked. Enough hits end the pause early.
  void after_shadow(bool hit);
  int32_t k() const { return k_; }
  bool paused() const { return paused_for_ > 0; }
  // Expected tokens per verification step with per-draft acceptance `alpha` and k
  // drafts: (1 - alpha^(k+1)) / (1 - alpha) (Leviathan et al. 2023).
  static double expected_tokens(double alpha, int32_t k);
  // Expected speed of steps of k drafts relative to plain steps, from the measured
  // acceptance and costs: expected_tokens(alpha, k) * plain / (k * draft + verify(k)),
  // verify(k) = plain * (1 + slope * k). -1 while a figure is missing.
  double gain(int32_t k) const;

 private:
  SpeculativeOptions o_;
  int32_t k_;
  double acceptance_ = -1.0;      // estimated per-draft acceptance (-1: none yet)
  double accepted_mean_ = 0.0;    // running mean of the drafts a step kept
  double rejected_mean_ = 0.0;    // running mean of the steps that rejected a draft (0 or 1)
  double plain_cost_ = 0.0;       // seconds of a plain step (running mean; 0 = not measured)
  double draft_cost_ = 0.0;       // seconds per draft token (running mean; 0 = not measured)
  double verify_slope_ = 0.0;     // a verification of k + 1 tokens costs plain * (1 + slope * k)
  double step_tokens_ = 0.0;      // tokens a verification step yielded (running mean since the last probe)
  double step_cost_ = 0.0;        // seconds of drafting + verifying a step (same)
  int32_t costed_steps_ = 0;      // steps in these two means
  int32_t backoff_ = 1;           // the next pause is probe_interval * backoff_ tokens
  int32_t paused_for_ = 0;        // plain tokens still to take before drafting again
  double shadow_hits_ = 0.0;      // running mean of shadow hits during a pause
  int32_t shadow_steps_ = 0;      // shadow drafts scored during this pause
  bool warmed_up_ = false;        // a verification step has been taken (the first is not costed)
};

// The speculative state of one generation between and within its steps.
struct SpeculativeState {
  explicit SpeculativeState(const SpeculativeOptions& o) : options(o), policy(o) {}
  SpeculativeOptions options;
  DraftPolicy policy;
  // The step in flight: the drafts appended after the pending token at n0 - 1, and
  // the logits rows [drafts + 1][n_vocab] the step writes through `sink`.
  std::vector<int32_t> drafts;
  size_t n0 = 0;
  std::vector<float> rows;
  std::function<void(size_t, std::span<const float>)> sink;
  double draft_seconds = 0.0;
  std::optional<int32_t> shadow;  // a paused free source's first draft for this plain step
  double catch_up_seconds = 0.0;  // of draft_seconds: the draft catching up with the context
  bool force_plain = false;  // the last drafts did not fit the cache: one plain step
};

// A speculative step's part for `generation` (not prefilling, its last sampled token
// pending): drafts up to min(k, max_drafts) tokens and appends them. The part and
// the state must stay alive and untouched until finish_speculative_step().
StepPart begin_speculative_step(Generation& generation, Sequence& seq, DraftSource& source, SpeculativeState& state,
                                int64_t max_drafts);
// Books the step: on ok, picks tokens from the rows with the generation's sampler,
// keeps the drafts that match and rolls the others back; on cancelled ends the
// generation; on cache_full drops the drafts and, when there were any, leaves the
// generation to retry plainly at its next step.
void finish_speculative_step(Generation& generation, Sequence& seq, const StepPart& part, SpeculativeState& state,
                             double step_seconds, SpeculativeMetrics& metrics);
// Drops the drafts of a step that did not run (the pool was short), keeping the
// pending token.
void abandon_speculative_step(Sequence& seq, SpeculativeState& state);

// Runs `generation` to its end with speculative steps on `seq` (whose next pending
// token is the last sampled one). Rejected drafts are rolled back from the cache.
void run_speculative(Generation& generation, Sequence& seq, DraftSource& source, const SpeculativeOptions& options,
                     std::atomic<bool>& cancel, SpeculativeMetrics& metrics);

}  // namespace ember::runtime
