#include "model/arch.hpp"

#include <array>

namespace ember::model {
namespace {

using backend::Activation;
using backend::RopeMode;

// Facts per family from the reference implementations (Hugging Face transformers
// configs; llama.cpp's model table for the GGUF tensor and key names).
constexpr std::array<ArchTraits, 9> kArchs{{
    {.name = "llama"},
    {.name = "qwen2", .rope_mode = RopeMode::neox},
    {.name = "qwen3", .rope_mode = RopeMode::neox, .qk_norm = QkNorm::per_head},
    // Qwen3-MoE: qwen3's attention, a routed mixture of experts instead of the FFN.
    {.name = "qwen3moe", .rope_mode = RopeMode::neox, .qk_norm = QkNorm::per_head, .moe = true},
    // Gemma 2: every other layer local (window 4096 unless GGUF says otherwise), the
    // same rope on all layers; attention scores and logits soft-capped with tanh.
    {.name = "gemma2",
     .rope_mode = RopeMode::neox,
     .ffn_activation = Activation::gelu_tanh,
     .scale_embeddings = true,
     .post_norms = true,
     .scale_queries = true,
     .swa_pattern = 2,
     .swa_default_window = 4096,
     .softcaps = true},
    // Gemma 3: 5 local (sliding-window) layers for each global one; local layers
    // use rope base 10k while global ones use the file's base (1M). Q is scaled before
    // the attention (as Gemma's reference does): with the cache in F16 the scaled
    // queries are what gets rounded, which differs for the smallest values.
    {.name = "gemma3",
     .rope_mode = RopeMode::neox,
     .ffn_activation = Activation::gelu_tanh,
     .scale_embeddings = true,
     .qk_norm = QkNorm::per_head,
     .post_norms = true,
     .scale_queries = true,
     .swa_pattern = 6,
     .swa_rope_base = 10000.0f},
    // Granite (IBM): llama with four multipliers read from GGUF.
    {.name = "granite", .granite_scales = true},
    // OLMo 2 (AI2): norms only after attention and FFN; Q/K norms over the whole row.
    {.name = "olmo2", .rope_mode = RopeMode::neox, .qk_norm = QkNorm::whole, .pre_norms = false, .post_norms = true},
    // Phi-3: fused projections, Q scaled before attention, optional LongRoPE factors;
    // rope.dimension_count < head size rotates only the leading dims (Phi-4-mini).
    {.name = "phi3", .rope_mode = RopeMode::neox, .scale_queries = true, .fused_projections = true,
     .rope_factors = true},
}};

}  // namespace

const ArchTraits* find_arch(std::string_view name) {
  for (const ArchTraits& a : kArchs)
    if (a.name == name) return &a;
  return nullptr;
}

std::span<const ArchTraits> supported_archs() { return kArchs; }

}  // namespace ember::model
