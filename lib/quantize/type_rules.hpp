// Which type each tensor of a model gets: llama.cpp's per-tensor rules
// (src/llama-quant.cpp, llama_tensor_get_type) for the types `ember quantize` writes,
// so that ember's Q4_K_M and Q5_K_M files have the same tensor types as llama-quantize's.
//
// The rules depend on the order tensors are visited (counters of attn_v and ffn_down
// tensors): llama.cpp visits them by layer number (tensors outside blk.N first), then by
// name; plan_types() does the same and returns the plan in that order, which is also
// the order the output file lists them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "quant/dtype.hpp"

namespace ember::quantize {

// What the user asked for (`--type`).
enum class Recipe { q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, q4_k_m, q5_k_m, q4_g128, q4_g64, q8_w, q8_wr, f16 };

struct RecipeInfo {
  Recipe recipe;
  std::string_view name;     // "Q4_K_M"
  quant::DType base;         // the type of most tensors
  uint32_t file_type;        // general.file_type (llama_ftype) written to the file
  bool mixture;              // the _M rules (attn_v, ffn_down, attn_qkv widened)
};
const RecipeInfo& recipe_info(Recipe recipe);
// Case-insensitive name ("q4_k_m"); nullptr when unknown.
const RecipeInfo* find_recipe(std::string_view name);
// "Q8_0, Q4_0, ..." for messages.
std::string recipe_names();

// One tensor as the rules see it.
struct TensorShape {
  std::string name;
  quant::DType type;              // its type in the input
  std::vector<int64_t> shape;     // GGUF order (shape[0] contiguous)
  size_t index = 0;               // position in the input file
};

// Model facts the rules use.
struct ModelFacts {
  std::string arch;               // general.architecture
  int64_t n_layer = 0;            // {arch}.block_count
  int64_t n_expert = 0;           // {arch}.expert_count (0: dense)
  int64_t n_head = 0, n_head_kv = 0;   // for llama's 70B rule
};

struct TensorPlan {
  size_t index = 0;               // into the input's tensors
  quant::DType type;              // chosen output type (== input type: copied unchanged)
  bool quantize = false;          // false: copied as it is (norms, 1-D tensors, same type)
  bool fallback = false;          // the row length forced a wider type than the rules chose
};

// The visiting order described above: indices into `tensors`.
std::vector<size_t> llama_order(const std::vector<TensorShape>& tensors);

// Plans every tensor, in llama_order. `pure`: every quantizable tensor gets the recipe's
// base type (only the row-length fallback still applies). Throws unsupported for a
// tensor whose rows no type of the recipe can hold.
std::vector<TensorPlan> plan_types(const std::vector<TensorShape>& tensors, const ModelFacts& facts, Recipe recipe,
                                   bool pure);

}  // namespace ember::quantize
