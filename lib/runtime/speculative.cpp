// The verification loop, the draft-length policy and prompt lookup.
#include "runtime/speculative.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/fail.hpp"
#include "runtime/model_impl.hpp"

namespace ember::runtime {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Running means move by this share of each new measurement.
constexpr double kMeanWeight = 0.3;
double blend(double mean, double value) { return mean == 0.0 ? value : mean + kMeanWeight * (value - mean); }

}  // namespace

// ---- prompt lookup ----

std::vector<int32_t> lookup_draft(std::span<const int32_t> context, int32_t k, int32_t max_ngram, int32_t min_ngram) {
  const auto size = int64_t(context.size());
  for (int32_t n = max_ngram; n >= min_ngram; --n) {
    if (size <= n) continue;
    const auto pattern = context.subspan(size_t(size - n));
    // The most recent earlier occurrence, ending before the context does.
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(pattern.begin(), pattern.end(), context.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t count = std::min<int64_t>(k, size - from);
      return {context.begin() + from, context.begin() + from + count};
    }
  }
  return {};
}

// ---- the policy ----

DraftPolicy::DraftPolicy(const SpeculativeOptions& options)
    : o_(options), k_(options.adaptive ? std::min(options.draft_max, 4) : options.draft_max) {
  k_ = std::max(k_, options.draft_min);
}

double DraftPolicy::expected_tokens(double alpha, int32_t k) {
  if (alpha >= 1.0) return double(k + 1);
  return (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha);
}

int32_t DraftPolicy::next_k() const {
  if (!o_.adaptive) return k_;
  // The first step is plain: it measures what a token costs without drafts.
  if (plain_cost_ == 0.0 || paused_for_ > 0) return 0;
  return k_;
}

void DraftPolicy::after_plain(double seconds) {
  plain_cost_ = blend(plain_cost_, seconds);
  if (paused_for_ > 0 && --paused_for_ == 0) {
    shadow_hits_ = 0.0;
    shadow_steps_ = 0;
    k_ = o_.draft_min;  // probe again from the shortest drafts
    acceptance_ = -1.0;
    accepted_mean_ = rejected_mean_ = 0.0;
    step_tokens_ = step_cost_ = 0.0;
    costed_steps_ = 0;
  }
}

void DraftPolicy::after_shadow(bool hit) {
  if (paused_for_ <= 0) return;
  shadow_hits_ = shadow_steps_++ == 0 ? double(hit) : shadow_hits_ + kMeanWeight * (double(hit) - shadow_hits_);
  // Four scored drafts at least, most of them right: the text repeats again. The
  // next after_plain() ends the pause and probes from draft_min.
  if (shadow_steps_ >= 4 && shadow_hits_ >= o_.min_acceptance) paused_for_ = 1;
}

double DraftPolicy::gain(int32_t k) const {
  if (plain_cost_ <= 0.0 || draft_cost_ <= 0.0 || acceptance_ < 0.0) return -1.0;
  const double step = k * draft_cost_ + plain_cost_ * (1.0 + verify_slope_ * k);
  return expected_tokens(acceptance_, k) * plain_cost_ / step;
}

void DraftPolicy::after_verify(int32_t drafted, int32_t accepted, double draft_seconds, double verify_seconds) {
  if (!o_.adaptive || drafted == 0) return;
  // Per-draft acceptance as the model of expected_tokens() has it: each draft passes
  // with probability alpha until the first rejection, which ends the step. Its
  // estimate is accepted / (accepted + rejections), not accepted / drafted: one
  // early rejection in a long draft says little about alpha.
  const double rejected = accepted < drafted ? 1.0 : 0.0;
  const bool first = acceptance_ < 0.0;
  accepted_mean_ = first ? accepted : accepted_mean_ + kMeanWeight * (accepted - accepted_mean_);
  rejected_mean_ = first ? rejected : rejected_mean_ + kMeanWeight * (rejected - rejected_mean_);
  acceptance_ = accepted_mean_ + rejected_mean_ > 0.0 ? accepted_mean_ / (accepted_mean_ + rejected_mean_) : 0.0;
  // Costs per draft token and per verified token, so that steps of different k
  // inform each other. The first verification of a generation also pays the draft's
  // first touches of its cache and scratch (page faults): not a cost of drafting.
  if (!warmed_up_) {
    warmed_up_ = true;
  } else {
    draft_cost_ = blend(draft_cost_, draft_seconds / drafted);
    if (plain_cost_ > 0.0)
      verify_slope_ = blend(verify_slope_, std::max(0.0, (verify_seconds / plain_cost_ - 1.0) / drafted));
    step_tokens_ = blend(step_tokens_, accepted + 1.0);
    step_cost_ = blend(step_cost_, draft_seconds + verify_seconds);
    ++costed_steps_;
  }
  if (accepted == drafted && k_ < o_.draft_max) {
    ++k_;
  } else if (acceptance_ < o_.min_acceptance && k_ > o_.draft_min) {
    --k_;
  }
  if (costed_steps_ < 2 || plain_cost_ <= 0.0) return;
  // What the recent steps gained: their tokens for their time against plain steps'.
  // While that is a loss, take the k the cost model (docs/speculative.md) rates best
  // below the current one; at draft_min, draft nothing for a while. Pauses that
  // follow each other lengthen (up to 8x probe_interval): a probe costs a draft's
  // catch-up and a verification.
  if (step_tokens_ * plain_cost_ / step_cost_ >= 1.0) {
    backoff_ = 1;
    return;
  }
  if (k_ > o_.draft_min) {
    int32_t best = o_.draft_min;
    for (int32_t k = o_.draft_min + 1; k < k_; ++k)
      if (gain(k) > gain(best)) best = k;
    k_ = best;
    return;
  }
  paused_for_ = o_.probe_interval * backoff_;
  backoff_ = std::min(backoff_ * 2, 8);
}

// ---- verification ----

StepPart begin_speculative_step(Generation& g, Sequence& seq, DraftSource& source, SpeculativeState& st,
                                int64_t max_drafts) {
  const auto n_vocab = size_t(seq.model_impl().loaded->hparams.n_vocab);
  st.n0 = seq.tokens().size();  // the last sampled token is pending at n0 - 1
  // Drafts beyond what max_tokens or the context can still take are wasted.
  const int64_t room = std::min<int64_t>({int64_t(g.tokens_left()) - 1, int64_t(seq.capacity()) - int64_t(st.n0),
                                          max_drafts});
  const int32_t k = st.force_plain ? 0 : int32_t(std::clamp<int64_t>(st.policy.next_k(), 0, std::max<int64_t>(room, 0)));
  st.force_plain = false;
  const auto draft_start = Clock::now();
  st.drafts = k > 0 ? source.draft(seq.tokens(), k) : std::vector<int32_t>{};
  st.shadow.reset();
  if (k == 0 && st.policy.paused() && source.free()) {
    const std::vector<int32_t> one = source.draft(seq.tokens(), 1);
    if (!one.empty()) st.shadow = one[0];
  }
  if (int32_t(st.drafts.size()) > k) st.drafts.resize(size_t(k));
  if (int32_t(st.drafts.size()) < st.options.draft_min) st.drafts.clear();
  st.draft_seconds = since(draft_start);
  st.catch_up_seconds = k > 0 ? std::min(source.catch_up_seconds(), st.draft_seconds) : 0.0;
  seq.append(st.drafts);
  st.rows.resize((st.drafts.size() + 1) * n_vocab);
  st.sink = [&st, n_vocab](size_t i, std::span<const float> row) {
    std::copy(row.begin(), row.end(), st.rows.begin() + long(i * n_vocab));
  };
  StepPart part = seq.next_part(st.drafts.size() + 1, &st.sink, st.n0 - 1);
  // Under KV eviction each token of the step makes room as its plain step would
  // (KVCache::place_stepwise), so that rejected drafts can be cut exactly.
  part.stepwise = seq.evicts() && !st.drafts.empty();
  return part;
}

void abandon_speculative_step(Sequence& seq, SpeculativeState& st) {
  seq.rewind(st.n0);
  st.drafts.clear();
}

void finish_speculative_step(Generation& g, Sequence& seq, const StepPart& part, SpeculativeState& st,
                             double step_seconds, SpeculativeMetrics& metrics) {
  seq.finish_part(part);
  const size_t m = st.drafts.size(), n0 = st.n0;
  const auto n_vocab = size_t(seq.model_impl().loaded->hparams.n_vocab);
  if (part.status != StepStatus::ok) {
    abandon_speculative_step(seq, st);  // the drafts go; the last sampled token stays pending
    if (part.status == StepStatus::cancelled) {
      g.finish(StopReason::cancelled);
    } else if (m > 0) {
      st.force_plain = true;  // the drafts did not fit: try the token alone
    } else {
      g.finish(StopReason::context_full);
    }
    return;
  }
  // The target's own pick at every position, in order, with the request's sampler.
  size_t accepted = 0;
  bool extra = false;  // a picked token beyond the accepted drafts joined the output
  for (size_t i = 0; i <= m; ++i) {
    const std::optional<int32_t> token =
        g.sample_from(std::span<const float>(st.rows).subspan(i * n_vocab, n_vocab), n0 + i, /*append=*/false);
    if (!token) break;
    if (i < m && *token == st.drafts[i]) {
      ++accepted;
      if (g.done()) break;
      continue;
    }
    extra = true;
    break;
  }
  seq.rewind(n0 + accepted);  // rejected drafts leave the cache
  if (extra) {
    const int32_t last[1] = {g.result().tokens.back()};
    seq.append(last);  // pending, like a plainly sampled token
  }
  if (m > 0) {
    ++metrics.steps;
    metrics.drafted += int64_t(m);
    metrics.accepted += int64_t(accepted);
    if (accepted < m) ++metrics.rejected_steps;
    metrics.draft_seconds += st.draft_seconds;
    metrics.verify_seconds += step_seconds;
    st.policy.after_verify(int32_t(m), int32_t(accepted), st.draft_seconds - st.catch_up_seconds, step_seconds);
  } else {
    ++metrics.plain_steps;
    metrics.plain_seconds += step_seconds;
    metrics.draft_seconds += st.draft_seconds;
    if (st.shadow && !g.result().tokens.empty()) st.policy.after_shadow(g.result().tokens.back() == *st.shadow);
    st.policy.after_plain(step_seconds + st.draft_seconds);
  }
  metrics.current_k = st.policy.k();
  st.drafts.clear();
}

void run_speculative(Generation& g, Sequence& seq, DraftSource& source, const SpeculativeOptions& options,
                     std::atomic<bool>& cancel, SpeculativeMetrics& metrics) {
  SpeculativeState st(options);
  metrics.current_k = st.policy.k();
  while (!g.done()) {
    if (cancel.exchange(false)) {
      g.finish(StopReason::cancelled);
      break;
    }
    StepPart part = begin_speculative_step(g, seq, source, st, 16);
    const auto step_start = Clock::now();
    seq.executor().step(seq.cache(), std::span(&part, 1), &cancel, seq.sum_order());
    if (part.status == StepStatus::cancelled) cancel.store(false);
    finish_speculative_step(g, seq, part, st, since(step_start), metrics);
  }
}

}  // namespace ember::runtime
