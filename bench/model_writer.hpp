// Random-weight llama-architecture GGUF models for speed measurements.
//
// The files carry everything llama.cpp (src/llama-model.cpp, llama-vocab.cpp)
// requires of a "llama" model, so that ember and llama.cpp can be timed on the
// same bytes: hyper-parameters, a SentencePiece ("llama") vocabulary with the 256
// byte tokens, and the standard tensor names. The weights are random but sane
// (quantized from normal values of standard deviation 0.02, norms of 1), so the
// forward pass stays finite; the text it produces means nothing.
//
// Weight types per tensor follow llama.cpp's `llama-quantize` for the file type
// (src/llama-quant.cpp, llama_tensor_get_type), see weight_type_of().
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "quant/dtype.hpp"

namespace ember::bench {

// Shape of a llama-architecture model.
struct LlamaShape {
  int64_t n_embd = 2048;      // embedding width; a multiple of 256 for the K formats
  int64_t n_ff = 5632;        // feed-forward width; a multiple of 256 for the K formats
  int n_layer = 22;           // transformer blocks
  int n_head = 32;            // query heads; n_embd / n_head is the head size
  int n_head_kv = 4;          // key/value heads; divides n_head
  int64_t n_vocab = 32000;    // vocabulary size, at least 259 (3 specials + 256 byte tokens)
  int64_t n_ctx = 2048;       // llama.context_length
  float rope_base = 10000.0f; // llama.rope.freq_base
  float rms_eps = 1e-5f;      // llama.attention.layer_norm_rms_epsilon
  int64_t head_dim = 0;       // per-head width; 0: n_embd / n_head (key_length / value_length when set)
  // Mixture of experts: n_expert > 0 writes a "qwen3moe" model (per-head Q/K norms, a
  // router and n_expert gated FFNs of width n_ff_exp per layer, n_expert_used per token).
  int n_expert = 0;           // experts per layer; 0: a dense llama model
  int n_expert_used = 0;      // experts per token, 1..n_expert
  int64_t n_ff_exp = 0;       // expert FFN width; a multiple of 256 for the K formats
};

// Named shapes: "tinyllama-1.1b" (TinyLlama 1.1B), "tiny" (2 layers, n_embd 256, for tests),
// "qwen3-30b-a3b" (Qwen3-30B-A3B's layer shapes: n_embd 2048, 32 / 4 heads of 128, 128
// experts of width 768 with 8 per token; 4 of its 48 layers and a 32000-token vocabulary,
// which keeps the Q4_0 file near 1.4 GB).
std::optional<LlamaShape> llama_preset(std::string_view name);

// File types, as llama-quantize names them (the `general.file_type` values are
// llama.cpp's llama_ftype).
enum class FileType { f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k_m, q5_k_m, q6_k };
std::optional<FileType> file_type_from_name(std::string_view name);   // "q4_k_m", "Q4_K_M", ...
std::string_view file_type_name(FileType type);                        // "Q4_K_M"
uint32_t llama_ftype(FileType type);                                   // general.file_type

// Weight type of a tensor of a `type` file, as llama-quantize chooses it:
//   output.weight: Q6_K for every quantized type except Q8_0 (which keeps Q8_0);
//   Q4_K_M / Q5_K_M: attn_v and ffn_down of the layers where llama.cpp's
//     use_more_bits(i, n) holds (the first and last eighth, and every third layer
//     in between) are Q6_K, everything else Q4_K / Q5_K (token_embd included);
//   norms (`is_norm`) and the MoE router (ffn_gate_inp) stay F32; everything else has
//   the file's base type. ffn_down_exps follows the ffn_down rule.
// `kind` is the tensor name without "blk.N." ("attn_v.weight", "output.weight", ...).
quant::DType weight_type_of(FileType type, std::string_view kind, int layer, int n_layer);

struct ModelSpec {
  LlamaShape shape;
  FileType type = FileType::q4_0;
  uint32_t seed = 1;                 // seed of the random weights
  std::string name = "ember-bench";  // general.name
};

// Writes the model to `path` ("llama", or "qwen3moe" when shape.n_expert > 0). Throws ember::Error: invalid_argument (shape), io.
// Takes seconds for a 1B model: each matrix is filled with copies of 64 rows
// quantized from random values (a row's contents do not change the speed of any
// kernel), not by quantizing every row.
void write_llama_model(const ModelSpec& spec, const std::filesystem::path& path);

// Small random-weight F32 models of the families that differ from llama, for the
// fidelity tests against llama.cpp (tests/data/arch/README.md; quantized copies are
// made with llama-quantize): "gemma2", "granite", "olmo2", "phi3", "qwen3moe". Each has 2 layers,
// n_embd 64, n_ff 192, 4 query heads over 2 KV heads and the 320-token vocabulary
// above, plus its family's own metadata and tensors, with values chosen so that each
// difference changes the logits (soft-caps that bite, scales far from 1, partial rotary
// with LongRoPE factors). Every matrix element is drawn (no repeated rows).
// Throws invalid_argument for an architecture not in the list, io.
void write_arch_test_model(std::string_view arch, uint32_t seed, const std::filesystem::path& path);

}  // namespace ember::bench
