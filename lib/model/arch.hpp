// Architectures as data: what differs between the model families ember runs.
//
// A family is one row of the table in arch.cpp; the forward pass
// (lib/model/forward.cpp) reads these switches instead of having one code path
// per family.
#pragma once

#include <span>
#include <string_view>

#include "backend/backend.hpp"

namespace ember::model {

struct ArchTraits {
  std::string_view name;              // general.architecture
  backend::RopeMode rope_mode;        // llama: pairs (2i, 2i+1); qwen2/qwen3/gemma3: halves (NEOX)
  backend::Activation ffn_activation; // gate activation of the gated FFN
  bool scale_embeddings;              // multiply token embeddings by sqrt(n_embd) (gemma)
  bool qk_norm;                       // per-head RMSNorm of Q and K before rope (qwen3, gemma3)
  bool post_norms;                    // RMSNorm after attention and after the FFN, before the residual add (gemma3)
  bool scale_queries;                 // multiply Q by the attention scale before attention, not the scores (gemma3)
  int swa_pattern;                    // 0: no sliding window; n: layers il with il % n < n - 1 use the window
  float swa_rope_base;                // rope base of sliding-window layers when GGUF has none (gemma3: 10000)
};

// The traits of an architecture name; nullptr when ember does not support it.
const ArchTraits* find_arch(std::string_view name);
std::span<const ArchTraits> supported_archs();

}  // namespace ember::model
