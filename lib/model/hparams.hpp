// Hyper-parameters of a model, read from GGUF metadata only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.hpp"
#include "model/arch.hpp"

namespace ember::model {

struct LayerParams {
  bool sliding = false;      // uses the sliding window
  int window = 0;            // tokens visible (0: all)
  float rope_base = 0.0f;    // rope frequency base of this layer
  float rope_scale = 1.0f;   // position multiplier (1 / linear scaling factor)
};

struct HParams {
  const ArchTraits* arch = nullptr;
  std::string name;          // general.name, if present
  int64_t n_vocab = 0;       // rows of token_embd
  int64_t n_ctx_train = 0;   // {arch}.context_length
  int64_t n_embd = 0;        // {arch}.embedding_length
  int n_layer = 0;           // {arch}.block_count
  int64_t n_ff = 0;          // {arch}.feed_forward_length
  int n_head = 0;            // {arch}.attention.head_count
  int n_head_kv = 0;         // {arch}.attention.head_count_kv (default n_head)
  int head_dim_k = 0;        // {arch}.attention.key_length (default n_embd / n_head)
  int head_dim_v = 0;        // {arch}.attention.value_length (default head_dim_k)
  int n_rot = 0;             // {arch}.rope.dimension_count (default head_dim_k)
  float rms_eps = 1e-5f;     // {arch}.attention.layer_norm_rms_epsilon
  float attention_scale = 0; // multiplies q.k: 1/sqrt(head_dim), or granite's {arch}.attention.scale
  float embedding_scale = 1; // multiplies token embeddings: sqrt(n_embd) (gemma), {arch}.embedding_scale (granite)
  float residual_scale = 1;  // multiplies attention and FFN outputs before the residual add (granite)
  float logit_scale = 1;     // multiplies the logits: 1 / {arch}.logit_scale (granite)
  float attn_softcap = 0;    // 0: none; scores become c * tanh(scores / c) ({arch}.attn_logit_softcapping, gemma2)
  float final_softcap = 0;   // 0: none; logits become c * tanh(logits / c) ({arch}.final_logit_softcapping)
  float rope_mscale = 1;     // {arch}.rope.scaling.attn_factor: multiplies rope's cos and sin (LongRoPE)
  int n_expert = 0;          // {arch}.expert_count (MoE families; 0: dense)
  int n_expert_used = 0;     // {arch}.expert_used_count: experts per token
  int64_t n_ff_exp = 0;      // {arch}.expert_feed_forward_length (default n_ff / n_expert_used)
  // {arch}.expert_weights_norm: the chosen experts' probabilities are divided by their
  // sum (default true, as llama.cpp's qwen3moe graph always does; Qwen3's norm_topk_prob).
  bool expert_weights_norm = true;
  int32_t bos_token = -1;    // tokenizer.ggml.bos_token_id (-1: none or outside the vocabulary); its keys at
                             // position 0 are the key offsets of quantized KV caches (model/forward.hpp)
  int64_t n_ctx_orig = 0;    // {arch}.rope.scaling.original_context_length (default n_ctx_train): LongRoPE
                             // uses its long factors when a sequence may hold more tokens
  std::vector<LayerParams> layers;

  // Reads and validates; throws malformed_file / unsupported naming the key.
  static HParams from_gguf(const gguf::File& file);
};

}  // namespace ember::model
