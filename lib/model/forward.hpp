// One forward pass over a batch of tokens from any number of sequences.
//
// Prefill, decode, several sequences at once and (later) speculative
// verification are all this one call: each entry is (token, position, sequence
// id, wants-logits). New keys/values go into the paged KV cache; each token
// attends to its own sequence's cells up to its position.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"
#include "kv/kv_cache.hpp"
#include "model/hparams.hpp"
#include "model/weights.hpp"

namespace ember::model {

struct BatchToken {
  int32_t token = 0;    // vocabulary id
  int32_t pos = 0;      // position in its sequence (rope and causal mask)
  int32_t seq = 0;      // sequence id in the KV cache
  bool logits = false;  // return this token's next-token logits
};

// Scratch tensors and the run loop; one per (model, backend) user, not thread-safe.
class Forward {
 public:
  // Batches larger than max_batch are run in consecutive chunks of max_batch tokens.
  Forward(const HParams& hp, const Weights& weights, backend::Backend& backend, int max_batch = 512);
  ~Forward();

  // Receives the logits row of batch entry `index` (entries with logits = true): one
  // value per row of weights.output, which is n_vocab except for a draft model
  // whose output matrix holds a subset of the vocabulary.
  using LogitsSink = std::function<void(size_t index, std::span<const float> row)>;

  // Runs `batch` and returns how many of its tokens were processed: all of them,
  // or fewer when `cancel` became true (checked between layers; the chunk in
  // flight is undone, earlier chunks stay in the cache). Logits rows go to `sink`
  // in batch order, at most kLogitsRowsPerPass at a time, so that scoring long
  // texts needs no [n_tokens][n_vocab] buffer. Throws invalid_argument for bad
  // tokens/positions and cache_full when the cache has no room; on any failure
  // the cache is left as it was before the call.
  size_t run(kv::KVCache& cache, std::span<const BatchToken> batch, const LogitsSink& sink,
             const std::atomic<bool>* cancel = nullptr);
  // As above, collecting [n_wanted][n_vocab] floats into `logits`, rows in batch order.
  size_t run(kv::KVCache& cache, std::span<const BatchToken> batch, std::vector<float>& logits,
             const std::atomic<bool>* cancel = nullptr);

  // One step whose cells the caller placed (`placement` = cache.place() of exactly
  // these entries, in this order) and whose transaction the caller ends: compute()
  // neither undoes, commits nor trims. H2O scores are added only when every layer
  // ran. Returns false when `cancel` became true (nothing of the step is visible
  // in the cache then except the rows written into the placed cells).
  bool compute(kv::KVCache& cache, std::span<const BatchToken> batch, const kv::Placement& placement,
               size_t first_index, const LogitsSink& sink, const std::atomic<bool>* cancel);

  static constexpr int64_t kLogitsRowsPerPass = 32;

  // Rewrites moved StreamingLLM sink rows: each original key rotated by its move.
  void apply_sink_moves(kv::KVCache& cache, std::span<const kv::SinkMove> moves);

  // Key offsets of quantized KV caches, [n_layer][n_head_kv * head_dim] f32: caches of
  // the kv_q* types store every key minus its layer's offset, the key that the BOS token
  // has at position 0 (all zeros for a model without a BOS token, or with soft-capped
  // scores). Keys carry large channel means (Gemma 3 270M: one channel of layer 11 has
  // mean -77 and rms 77; centering removes 20-75 % of a layer's key energy), which set
  // the range of their INT8/INT4 groups; the BOS key has the same means, so its
  // difference from a key is small. A query's scores against all cells of a layer then
  // change by the same q . offset, which softmax ignores: attention is exact up to the
  // quantization (SageAttention, Zhang et al. 2024, smooths K by its mean the same way).
  // Computed by one BOS forward on the first call with a quantized cache.
  const std::vector<float>& key_offsets();

  // Calibration hook (ember quantize --method gptq): called before the projections
  // of layer `layer` that read `input` ([n_tokens, n_in] f32 on the backend), with
  // the GGUF name stems of those weights ("attn_q", "attn_k", "attn_v", "attn_qkv";
  // "attn_output"; "ffn_gate", "ffn_up"; "ffn_down"). Dense layers only (MoE experts
  // are not reported). Unset, it costs one test per projection group.
  using MatmulObserver =
      std::function<void(int layer, std::span<const std::string_view> weights, const backend::Tensor& input)>;
  void set_matmul_observer(MatmulObserver observer) { observer_ = std::move(observer); }

  // Checks that every token id is in [0, n_vocab) and every pos/seq >= 0.
  void validate(std::span<const BatchToken> batch) const;

 private:
  struct Workspace;
  // Returns false when cancelled (the chunk's cells are then undone).
  bool run_chunk(kv::KVCache& cache, std::span<const BatchToken> chunk, size_t first_index, const LogitsSink& sink,
                 const std::atomic<bool>* cancel);
  // `exact`: room for a second attention pass over a cache's exact window.
  void ensure_workspace(int64_t n_tokens, int64_t n_out, int64_t n_rows, int64_t max_pages, int64_t max_cells,
                        bool scores, bool exact = false);

  // Offsets on the backend: -offset and +offset per layer, [1, kv width] each.
  void ensure_key_offsets();
  backend::RopeParams rope_params(const kv::KVCache& cache, int layer, int n_head) const;
  // Tensors of one token of a stepwise step (and of sink rewrites), in step_buffer_.
  struct StepScratch {
    int64_t pages = 0, cells = 0;
    Tensor slot, pos, seq0, cells_of, page_table, cell_pos, scores, key;
  };
  void ensure_step_scratch(int64_t max_pages, int64_t max_cells);
  // The tokens [begin, end) of the batch, all of sequence `seq`, of a stepwise
  // placement in layer `layer`: each placed, stored and attended alone, in order.
  void attend_stepwise(kv::KVCache& cache, int layer, int32_t seq, int64_t begin, int64_t end,
                       const backend::AttentionParams& base, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& attn);

  const HParams& hp_;
  const Weights& w_;
  int64_t n_logits_;  // rows of the output matrix: n_vocab, fewer for a reduced-vocabulary draft
  backend::Backend& be_;
  int max_batch_;
  std::unique_ptr<Workspace> ws_;
  std::vector<float> host_logits_;
  std::vector<float> key_offsets_;                 // [n_layer][kv width]; empty until needed
  std::shared_ptr<backend::Buffer> offset_buffer_;
  std::vector<Tensor> offset_neg_, offset_pos_;    // per layer, [1, kv width]
  std::vector<float>* capture_keys_ = nullptr;     // set while the BOS forward runs
  MatmulObserver observer_;
  std::unique_ptr<backend::Buffer> step_buffer_;
  StepScratch step_;
  std::vector<float> step_rows_, step_scores_;
};

}  // namespace ember::model
