// Speculative decoding: cheap drafts of the next tokens, verified by the model in
// one forward pass (the weights are read once for all of them).
//
// A draft source proposes up to k tokens after the context; the target model
// evaluates the last token and the k drafts in one step, and the request's own
// Sampler then picks a token from each row in order, exactly as plain decoding
// would, keeping drafts while they equal the picked tokens. The first picked token
// that differs from its draft (or the one after the last draft) is kept as well,
// and the rejected drafts are rolled back from the KV cache. Because drafts are
// deterministic and every position is sampled once, with the same generator, from
// the target's own logits, the output is token for token the output of plain
// decoding with the same sampler and seed (greedy or not): the method is lossless.
// docs/speculative.md has the design, the policy and the measured figures.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace ember {

class Model;

enum class DraftKind {
  none,    // plain decoding
  model,   // a separate, smaller model with the same vocabulary (greedy drafts)
  lookup,  // prompt lookup: continue the most recent earlier occurrence of the last n tokens
  self,    // the model drafts for itself, made cheaper (self_layers, self_vocab, self_lowbit)
};

struct SpeculativeOptions {
  DraftKind kind = DraftKind::none;
  // kind == model: the draft model. Its vocabulary must equal the target's (checked
  // at generate(): invalid_argument naming the first differing token). A draft with
  // more weight bytes than the target is allowed but logged as a warning.
  std::shared_ptr<const Model> draft_model;
  // Most drafted tokens per step (k). Default 4; range [1, 16].
  int32_t draft_max = 4;
  // Fewest drafted tokens worth a verification step (fewer: a plain step).
  // Default 1; range [1, draft_max].
  int32_t draft_min = 1;
  // kind == model: stop drafting when the draft model's probability of its own
  // pick falls below this (llama.cpp's --draft-p-min). Default 0 (off); [0, 1].
  float draft_p_min = 0.0f;
  // kind == self: how the model's own draft is made cheaper (any combination):
  //   self_layers: run only these layers (ascending, distinct; empty = all), as in
  //     LayerSkip / Draft & Verify; each keeps its own attention kind (sliding or global).
  //   self_vocab: score only N likely tokens (short pieces and whitespace runs,
  //     then by the vocabulary's piece scores, else the lowest ids), as in FR-Spec:
  //     the output matrix, which a model with a large vocabulary pays for at every
  //     token, shrinks to N rows. Each generation adds the tokens of its own
  //     context (prompt and output) as they appear, up to 1,024 more rows.
  //     0 = the whole vocabulary; else [256, n_vocab].
  //   self_lowbit: a Q4_0 copy of every layer matrix stored in more than 4.5 bits
  //     (the output matrix keeps its type; self_vocab makes it cheap).
  // The draft shares the model's thread pool and keeps a small KV cache of its own.
  std::vector<int32_t> self_layers;
  int32_t self_vocab = 0;
  bool self_lowbit = false;
  // kind == lookup: the longest and shortest n-grams matched. Defaults 3 and 1; [1, 16].
  int32_t lookup_max_ngram = 3;
  int32_t lookup_min_ngram = 1;
  // Adapt k to the acceptance: lengthen after a step that kept every draft, shorten
  // when the per-draft acceptance (kept / (kept + rejections)) falls below
  // min_acceptance or when recent steps were slower than plain decoding (to the k the
  // cost model rates best), and at draft_min draft nothing for `probe_interval`
  // tokens, doubling the pause after each failed probe (up to 8x). Default on.
  bool adaptive = true;
  float min_acceptance = 0.7f;   // [0, 1]
  int32_t probe_interval = 32;   // tokens; >= 1
};

// What speculation did during one generate() (all zero without it).
struct SpeculativeMetrics {
  int64_t steps = 0;          // verification steps that carried drafts
  int64_t drafted = 0;        // draft tokens proposed
  int64_t accepted = 0;       // of these, kept
  int64_t rejected_steps = 0; // verification steps that rejected a draft (the rest kept all)
  int64_t plain_steps = 0;    // steps without drafts (nothing proposed, or drafting paused)
  double draft_seconds = 0.0;   // time spent drafting
  double verify_seconds = 0.0;  // time in verification steps
  double plain_seconds = 0.0;   // time in plain steps
  int32_t current_k = 0;      // k at the end
  double acceptance_rate() const { return drafted > 0 ? double(accepted) / double(drafted) : 0.0; }
  // Per-draft acceptance alpha of the model in docs/speculative.md (each draft kept
  // with probability alpha until the first rejection): accepted / (accepted + rejections).
  double draft_acceptance() const {
    return accepted + rejected_steps > 0 ? double(accepted) / double(accepted + rejected_steps) : 0.0;
  }
  // Tokens gained per verification step: accepted drafts plus the one the step picks itself.
  double mean_accepted_per_step() const { return steps > 0 ? double(accepted + steps) / double(steps) : 0.0; }
};

}  // namespace ember
