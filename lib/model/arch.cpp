#include "model/arch.hpp"

#include <array>

namespace ember::model {
namespace {

using backend::Activation;
using backend::RopeMode;

// Facts per family from the reference implementations (Hugging Face transformers
// configs; llama.cpp's model table for the GGUF tensor names).
constexpr std::array<ArchTraits, 4> kArchs{{
    // name     rope             activation             scale_emb qk_norm post_norms scale_q swa  swa_base
    {"llama", RopeMode::normal, Activation::silu, false, false, false, false, 0, 0.0f},
    {"qwen2", RopeMode::neox, Activation::silu, false, false, false, false, 0, 0.0f},
    {"qwen3", RopeMode::neox, Activation::silu, false, true, false, false, 0, 0.0f},
    // Gemma 3: 5 local (sliding-window) layers for each global one; local layers
    // use rope base 10k while global ones use the file's base (1M). Q is scaled before
    // the attention (as Gemma's reference does): with the cache in F16 the scaled
    // queries are what gets rounded, which differs for the smallest values.
    {"gemma3", RopeMode::neox, Activation::gelu_tanh, true, true, true, true, 6, 10000.0f},
}};

}  // namespace

const ArchTraits* find_arch(std::string_view name) {
  for (const ArchTraits& a : kArchs)
    if (a.name == name) return &a;
  return nullptr;
}

std::span<const ArchTraits> supported_archs() { return kArchs; }

}  // namespace ember::model
