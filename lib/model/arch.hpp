// Architectures as data: what differs between the model families ember runs.
//
// A family is one row of the table in arch.cpp; the forward pass
// (lib/model/forward.cpp) reads these switches instead of having one code path
// per family. docs/model.md lists what each switch means per family.
#pragma once

#include <span>
#include <string_view>

#include "backend/backend.hpp"

namespace ember::model {

// RMSNorm of Q and K after their projections, before rope.
enum class QkNorm {
  none,
  per_head,  // over each head's head_dim values, one weight [head_dim] shared by the heads (qwen3, gemma3)
  whole,     // over the whole projection row, weights [n_head * head_dim] and [n_head_kv * head_dim] (olmo2)
};

struct ArchTraits {
  std::string_view name;                                        // general.architecture
  backend::RopeMode rope_mode = backend::RopeMode::normal;      // llama: pairs (2i, 2i+1); most others: halves (NEOX)
  backend::Activation ffn_activation = backend::Activation::silu;  // gate activation of the gated FFN
  bool scale_embeddings = false;   // multiply token embeddings by sqrt(n_embd) (gemma)
  QkNorm qk_norm = QkNorm::none;
  bool pre_norms = true;           // RMSNorm before attention and before the FFN (all but olmo2)
  bool post_norms = false;         // RMSNorm after attention and after the FFN, before the residual add (gemma, olmo2)
  bool scale_queries = false;      // multiply Q by the attention scale before attention, not the scores (gemma, phi3)
  int swa_pattern = 0;             // 0: no sliding window; n: layers il with il % n < n - 1 use the window
  float swa_rope_base = 0.0f;      // rope base of sliding-window layers when GGUF has none; 0: the global base and scale
  int swa_default_window = 0;      // window when GGUF has no attention.sliding_window; 0: the key is required
  bool softcaps = false;           // tanh soft-capping of attention scores and final logits (gemma2)
  bool granite_scales = false;     // embedding, residual, attention and logit multipliers from GGUF (granite)
  bool fused_projections = false;  // attn_qkv holds Q, K, V rows; ffn_up holds gate then up rows (phi3)
  bool rope_factors = false;       // LongRoPE factors rope_factors_long/short (optional tensors, phi3)
  bool moe = false;                // mixture-of-experts FFN (lib/model/moe.hpp) instead of the dense one (qwen3moe)
};

// The traits of an architecture name; nullptr when ember does not support it.
const ArchTraits* find_arch(std::string_view name);
std::span<const ArchTraits> supported_archs();

}  // namespace ember::model
