// One sequence on a model's executor: its tokens, its cells in the shared KV
// cache (with its own eviction policy and budget) and its next-token logits.
//
// tokens[0, n_evaluated) are in the cache; the rest are pending (a prompt not yet
// prefilled, or the last sampled token) and are evaluated by the next step that
// includes this sequence. Session, Engine and speculative decoding all keep their
// per-sequence state here; a Sequence belongs to one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ember/kv_cache.hpp"
#include "ember/model.hpp"
#include "runtime/executor.hpp"

namespace ember::runtime {

// The executor's cache for sessions with these options (types and exact window);
// checks the exact window's options (invalid_argument, unsupported).
kv::KVCache& cache_for(Executor& ex, const KVCacheOptions& kv);

class Sequence {
 public:
  // Checks the options (invalid_argument naming the field) and registers the
  // sequence's budget and eviction policy with the executor's cache.
  Sequence(std::shared_ptr<const Model> model, const KVCacheOptions& kv, int32_t prefill_chunk_size);
  // A copy of `other` sharing its cache pages copy-on-write.
  Sequence(const Sequence& other);
  ~Sequence();
  Sequence& operator=(const Sequence&) = delete;

  const Model& model() const { return *model_; }
  const Model::Impl& model_impl() const { return m_; }
  Executor& executor() const { return ex_; }
  kv::KVCache& cache() const { return cache_; }
  int32_t id() const { return id_; }
  const KVCacheOptions& kv_options() const { return kv_; }
  // Most tokens per prefill step (the option, capped by the eviction window).
  int32_t chunk() const { return chunk_; }
  // Most tokens the context holds (INT32_MAX with eviction).
  int32_t capacity() const { return capacity_; }
  bool evicts() const { return kv_.eviction != KVEviction::none; }
  // The order of sums of this sequence's steps (SessionOptions::batch_invariant).
  backend::SumOrder sum_order() const { return order_; }
  void set_sum_order(backend::SumOrder order) { order_ = order; }

  const std::vector<int32_t>& tokens() const { return tokens_; }
  size_t n_evaluated() const { return n_evaluated_; }
  size_t n_pending() const { return tokens_.size() - n_evaluated_; }
  std::span<const float> logits() const { return logits_; }
  bool logits_valid() const {
    return !tokens_.empty() && n_evaluated_ == tokens_.size() && logits_for_ == tokens_.size() - 1;
  }

  // Appends tokens as pending (checked against the vocabulary: invalid_argument).
  void append(std::span<const int32_t> tokens);
  // Drops pending tokens from `n` on (n >= n_evaluated).
  void drop_pending(size_t n);

  // The next step's part: up to `max_tokens` pending tokens, the last row's logits
  // kept when it is the last pending token. `sink` (optional) receives the rows of
  // tokens from index `sink_base` of tokens() on, numbered from there. The part
  // refers to this sequence's storage: append nothing until finish_part().
  StepPart next_part(size_t max_tokens, const std::function<void(size_t, std::span<const float>)>* sink = nullptr,
                     size_t sink_base = 0);
  // Books a step's outcome: ok moves n_evaluated past the part's tokens.
  void finish_part(const StepPart& part);

  // Evaluates every pending token in chunks, one executor step per chunk; `sink`
  // gets the rows of tokens from index `sink_base` of tokens() on. Chunks
  // finished before a cancellation stay; on cache_full the call's tokens are all
  // dropped again. Throws invalid_argument for a bad token (nothing changed).
  StepStatus evaluate_pending(const std::function<void(size_t, std::span<const float>)>* sink, size_t sink_base,
                              const std::atomic<bool>* cancel);
  // Makes logits() valid for the current context (evaluating the last token again
  // when its logits were lost). Throws invalid_argument when the sequence is empty.
  StepStatus ensure_logits(const std::atomic<bool>* cancel);

  // When every token is evaluated but the logits were lost (a cancellation), makes
  // the last token pending again so that the next step brings them back.
  void make_logits_pending();
  // Keeps the first `n` tokens; when cells the shorter context needs are gone
  // (window, eviction) the kept tokens are evaluated again by the next step.
  void rewind(size_t n);
  // Forgets the cache and marks every token pending (preemption: the next steps
  // recompute the context).
  void drop_cache();
  // Shares the first `n` evaluated tokens of `donor` (same cache), copy-on-write.
  // Returns false (and changes nothing) when they cannot be shared exactly.
  bool share_prefix(const Sequence& donor, size_t n);

  // Replaces the whole state (load_state). The cache blob goes in with the lock held.
  void restore(std::vector<int32_t> tokens, size_t n_evaluated, std::vector<float> logits, size_t logits_for,
               std::string_view kv_blob);
  void save_cache(std::string& out) const;
  size_t logits_for() const { return logits_for_; }

 private:
  void cut_cache_locked(size_t n);

  std::shared_ptr<const Model> model_;
  const Model::Impl& m_;
  Executor& ex_;
  KVCacheOptions kv_;
  kv::KVCache& cache_;
  int32_t id_ = 0;
  int32_t chunk_ = 512;
  int32_t capacity_ = 0;
  backend::SumOrder order_ = backend::SumOrder::llama_cpp;

  std::vector<int32_t> tokens_;
  size_t n_evaluated_ = 0;
  std::vector<float> logits_;  // next-token logits after tokens_[logits_for_]
  size_t logits_for_ = SIZE_MAX;
};

}  // namespace ember::runtime
