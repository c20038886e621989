// llama.cpp's per-tensor type rules for the recipes `ember quantize` writes (type_rules.hpp).
#include "quantize/type_rules.hpp"

#include <algorithm>
#include <array>
#include <cctype>

#include "common/fail.hpp"

namespace ember::quantize {
namespace {

using quant::DType;

// general.file_type values are llama.cpp's llama_ftype. The plain K recipes have no
// ftype of their own; they are written as the "_S" (mostly that type) codes.
constexpr std::array<RecipeInfo, 15> kRecipes{{
    {Recipe::q8_0, "Q8_0", DType::q8_0, 7, false},
    {Recipe::q4_0, "Q4_0", DType::q4_0, 2, false},
    {Recipe::q4_1, "Q4_1", DType::q4_1, 3, false},
    {Recipe::q5_0, "Q5_0", DType::q5_0, 8, false},
    {Recipe::q5_1, "Q5_1", DType::q5_1, 9, false},
    {Recipe::q4_k, "Q4_K", DType::q4_k, 14, false},
    {Recipe::q5_k, "Q5_K", DType::q5_k, 16, false},
    {Recipe::q6_k, "Q6_K", DType::q6_k, 18, false},
    {Recipe::q4_k_m, "Q4_K_M", DType::q4_k, 15, true},
    {Recipe::q5_k_m, "Q5_K_M", DType::q5_k, 17, true},
    // ember's own formats: no llama_ftype exists; the file type is the tensor type's id.
    {Recipe::q4_g128, "Q4_G128", DType::q4_g128, 1100, false},
    {Recipe::q4_g64, "Q4_G64", DType::q4_g64, 1101, false},
    {Recipe::q8_w, "Q8_W", DType::q8_w, 1102, false},
    {Recipe::q8_wr, "Q8_WR", DType::q8_wr, 1104, false},
    // No quantization: llama_ftype MOSTLY_F16, every quantizable tensor in F16 and no
    // per-tensor rules (llama-quantize applies them to quantized types only).
    {Recipe::f16, "F16", DType::f16, 1, false},
}};

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// The layer number of "blk.N....", -1 for other names.
int layer_of(std::string_view name) {
  if (!name.starts_with("blk.")) return -1;
  int layer = 0;
  size_t i = 4;
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && layer < 100000000; ++i)
    layer = layer * 10 + (name[i] - '0');
  return layer;
}

// Dimensions up to the last one above 1 (at least 1), as ggml counts them.
int n_dims(const std::vector<int64_t>& shape) {
  int n = 1;
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] > 1) n = int(i) + 1;
  return n;
}

// Whether llama-quantize quantizes the tensor at all: 2-D and larger tensors whose name
// ends in "weight", except norms, MoE routers, position/token-type embeddings and the
// small 2-D tensors of Mamba, RWKV and T5.
bool is_quantizable(const TensorShape& t) {
  const std::string_view name = t.name;
  if (!name.ends_with("weight") || n_dims(t.shape) < 2) return false;
  if (contains(name, "_norm.weight") || contains(name, "ffn_gate_inp.weight")) return false;
  if (name == "position_embd.weight" || name == "token_types.weight") return false;
  if (contains(name, "ssm_conv1d.weight") || contains(name, "attn_rel_b.weight")) return false;
  static constexpr std::string_view kRwkv[] = {"time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
                                               "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight",
                                               "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight",
                                               "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
                                               "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
                                               "time_mix_lerp_fused.weight"};
  for (std::string_view part : kRwkv)
    if (contains(name, part)) return false;
  return true;
}

// Layers that the _M recipes widen: the first and last eighth, and every third between.
bool use_more_bits(int64_t i_layer, int64_t n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// The wider type llama.cpp falls back to when the row length is not a multiple of the
// chosen type's block size.
DType fallback_of(DType type, const std::string& name, int64_t cols) {
  switch (type) {
    case DType::q4_k: return DType::q5_0;
    case DType::q5_k: return DType::q5_1;
    case DType::q6_k: return DType::q8_0;
    case DType::q4_g128: return cols % 64 == 0 ? DType::q4_g64 : DType::q4_1;
    case DType::q4_g64: return DType::q4_1;
    case DType::q8_wr: return DType::q8_w;   // rows of 32s but not 64s: W8A8 unrotated
    default:
      fail(ErrorCode::unsupported, "quantize: tensor '{}' has rows of {} values, not a multiple of the {} block size {}",
           name, cols, quant::type_name(type), quant::type_info(type).block_elems);
  }
}

struct Counters {
  int64_t n_attention_wv = 0, i_attention_wv = 0, i_ffn_down = 0;
  bool has_output = false;
};

// llama_tensor_get_type for the recipes above (no importance matrix, no overrides).
DType rule_type(const TensorShape& t, const ModelFacts& facts, const RecipeInfo& recipe, Counters& c) {
  const std::string& name = t.name;
  const int64_t cols = t.shape.empty() ? 1 : t.shape[0];
  const bool falcon = facts.arch == "falcon";
  const bool q4_k_m = recipe.recipe == Recipe::q4_k_m, q5_k_m = recipe.recipe == Recipe::q5_k_m;
  DType type = recipe.base;
  // The layer of a per-layer counter; MoE models take it from the name.
  auto layer_index = [&](int64_t counter) -> int64_t {
    if (facts.n_expert <= 1) return counter;
    const int layer = layer_of(name);
    if (layer < 0 || layer >= facts.n_layer)
      fail(ErrorCode::unsupported, "quantize: cannot tell the layer of tensor '{}' (expected blk.N with N < {})", name,
           facts.n_layer);
    return layer;
  };

  if (name == "output.weight" || (!c.has_output && name == "token_embd.weight")) {
    // The output projection (or the token embedding that serves as it) is kept wider.
    if (falcon || cols % quant::type_info(type).block_elems != 0)
      type = DType::q8_0;
    else if (type != DType::q8_0)
      type = DType::q6_k;
  } else if (name == "token_embd.weight") {
    // Left at the base type by every recipe here.
  } else if (contains(name, "attn_v.weight")) {
    if (recipe.mixture && use_more_bits(c.i_attention_wv, c.n_attention_wv)) type = DType::q6_k;
    const bool is_70b = (facts.arch == "llama" && facts.n_layer == 80 && facts.n_head != facts.n_head_kv) ||
                        (facts.arch == "qwen2" && facts.n_layer == 80);
    if (is_70b && type == DType::q4_k) type = DType::q5_k;
    if (facts.n_expert == 8) type = DType::q8_0;
    ++c.i_attention_wv;
  } else if (contains(name, "attn_k.weight")) {
    if (facts.n_expert == 8) type = DType::q8_0;
  } else if (contains(name, "attn_q.weight")) {
    // No rule for these recipes.
  } else if (contains(name, "ffn_down")) {
    const int64_t i_layer = layer_index(c.i_ffn_down), n_layer = facts.n_layer;
    if (q4_k_m) {
      if (falcon)
        type = i_layer < n_layer / 16 ? DType::q6_k : use_more_bits(i_layer, n_layer) ? DType::q5_k : DType::q4_k;
      else if (use_more_bits(i_layer, n_layer))
        type = DType::q6_k;
    } else if (q5_k_m && use_more_bits(i_layer, n_layer)) {
      type = DType::q6_k;
    }
    ++c.i_ffn_down;
  } else if (contains(name, "attn_output.weight")) {
    if (!falcon && facts.n_expert == 8 && q4_k_m) type = DType::q5_k;
  } else if (contains(name, "attn_qkv.weight")) {
    if (q4_k_m) type = DType::q5_k;
    if (q5_k_m) type = DType::q6_k;
  } else if (contains(name, "ffn_gate") || contains(name, "ffn_up")) {
    layer_index(0);   // only checks the name of an expert tensor, as llama.cpp does
  }
  return type;
}

}  // namespace

const RecipeInfo& recipe_info(Recipe recipe) {
  for (const RecipeInfo& r : kRecipes)
    if (r.recipe == recipe) return r;
  fail(ErrorCode::internal, "quantize: unknown recipe {}", int(recipe));
}

const RecipeInfo* find_recipe(std::string_view name) {
  for (const RecipeInfo& r : kRecipes) {
    if (r.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i)
      same = std::toupper(static_cast<unsigned char>(name[i])) == static_cast<unsigned char>(r.name[i]);
    if (same) return &r;
  }
  return nullptr;
}

std::string recipe_names() {
  std::string names;
  for (const RecipeInfo& r : kRecipes) names += (names.empty() ? "" : ", ") + std::string(r.name);
  return names;
}

std::vector<size_t> llama_order(const std::vector<TensorShape>& tensors) {
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int la = layer_of(tensors[a].name), lb = layer_of(tensors[b].name);
    if (la != lb) return la < lb;
    return tensors[a].name < tensors[b].name;
  });
  return order;
}

std::vector<TensorPlan> plan_types(const std::vector<TensorShape>& tensors, const ModelFacts& facts, Recipe recipe,
                                   bool pure) {
  const RecipeInfo& info = recipe_info(recipe);
  Counters counters;
  for (const TensorShape& t : tensors) {
    if (contains(t.name, "attn_v.weight") || contains(t.name, "attn_qkv.weight") || contains(t.name, "attn_kv_b.weight"))
      ++counters.n_attention_wv;
    else if (t.name == "output.weight")
      counters.has_output = true;
  }
  std::vector<TensorPlan> plans;
  for (size_t index : llama_order(tensors)) {
    const TensorShape& t = tensors[index];
    TensorPlan plan{.index = index, .type = t.type};
    if (is_quantizable(t)) {
      DType type = pure || quant::is_float_type(info.base) ? info.base : rule_type(t, facts, info, counters);
      const int64_t cols = t.shape.empty() ? 1 : t.shape[0];
      if (cols % quant::type_info(type).block_elems != 0) {
        type = fallback_of(type, t.name, cols);
        if (cols % quant::type_info(type).block_elems != 0) type = DType::f16;
        plan.fallback = true;
      }
      plan.type = type;
      plan.quantize = type != t.type;
    }
    plans.push_back(plan);
  }
  return plans;
}

}  // namespace ember::quantize
