#include "model/hparams.hpp"

#include <cmath>

#include "common/fail.hpp"

namespace ember::model {
namespace {

// A positive integer key that fits in an int, with a bound to reject absurd values early.
int64_t get_count(const gguf::File& f, const std::string& key, int64_t max_value) {
  const uint64_t v = f.get_uint(key);
  if (v == 0 || v > uint64_t(max_value))
    fail(ErrorCode::malformed_file, "{}: metadata key '{}' = {} is outside [1, {}]", f.name(), key, v, max_value);
  return int64_t(v);
}

// head_count_kv may be a scalar or a per-layer array (all equal for the families ember runs).
int64_t get_kv_heads(const gguf::File& f, const std::string& key, int64_t fallback, int n_layer) {
  const gguf::Value* v = f.find(key);
  if (!v) return fallback;
  if (!v->is_array()) return get_count(f, key, 1 << 16);
  const gguf::Array& a = v->as_array(key);
  if (a.items.size() != size_t(n_layer))
    fail(ErrorCode::malformed_file, "{}: '{}' has {} entries for {} layers", f.name(), key, a.items.size(), n_layer);
  const uint64_t first = a.items.empty() ? 0 : a.items[0].as_uint(key);
  for (const gguf::Value& item : a.items)
    if (item.as_uint(key) != first)
      fail(ErrorCode::unsupported, "{}: '{}' varies across layers, which ember does not support", f.name(), key);
  if (first == 0 || first > (1 << 16)) fail(ErrorCode::malformed_file, "{}: '{}' = {} is invalid", f.name(), key, first);
  return int64_t(first);
}

}  // namespace

HParams HParams::from_gguf(const gguf::File& f) {
  HParams hp;
  const std::string arch_name(f.get_string("general.architecture"));
  hp.arch = find_arch(arch_name);
  if (!hp.arch) {
    std::string names;
    for (const ArchTraits& a : supported_archs()) names += (names.empty() ? "" : ", ") + std::string(a.name);
    fail(ErrorCode::unsupported, "{}: architecture '{}' is not supported (supported: {})", f.name(), arch_name, names);
  }
  const std::string p = arch_name + ".";
  if (auto name = f.find_string("general.name")) hp.name = std::string(*name);

  const gguf::TensorInfo& embd = f.tensor("token_embd.weight");
  if (embd.shape.size() != 2)
    fail(ErrorCode::malformed_file, "{}: token_embd.weight has {} dimensions, expected 2", f.name(), embd.shape.size());
  hp.n_vocab = embd.shape[1];
  hp.n_ctx_train = get_count(f, p + "context_length", int64_t(1) << 24);
  hp.n_embd = get_count(f, p + "embedding_length", 1 << 20);
  hp.n_layer = int(get_count(f, p + "block_count", 4096));
  hp.n_ff = get_count(f, p + "feed_forward_length", 1 << 22);
  hp.n_head = int(get_count(f, p + "attention.head_count", 1 << 16));
  hp.n_head_kv = int(get_kv_heads(f, p + "attention.head_count_kv", hp.n_head, hp.n_layer));
  if (hp.n_head % hp.n_head_kv != 0)
    fail(ErrorCode::malformed_file, "{}: {} attention heads cannot be grouped over {} kv heads", f.name(), hp.n_head,
         hp.n_head_kv);
  const int64_t default_head = hp.n_embd / hp.n_head;
  hp.head_dim_k = int(f.find(p + "attention.key_length") ? get_count(f, p + "attention.key_length", 1 << 14)
                                                          : default_head);
  hp.head_dim_v = int(f.find(p + "attention.value_length") ? get_count(f, p + "attention.value_length", 1 << 14)
                                                            : hp.head_dim_k);
  if (hp.head_dim_k <= 0) fail(ErrorCode::malformed_file, "{}: attention head size is 0", f.name());
  if (hp.head_dim_v != hp.head_dim_k)
    fail(ErrorCode::unsupported, "{}: key length {} differs from value length {}", f.name(), hp.head_dim_k,
         hp.head_dim_v);
  hp.n_rot = int(f.find(p + "rope.dimension_count") ? get_count(f, p + "rope.dimension_count", hp.head_dim_k)
                                                    : hp.head_dim_k);
  if (hp.n_rot % 2 != 0) fail(ErrorCode::malformed_file, "{}: rope dimension count {} is odd", f.name(), hp.n_rot);
  hp.rms_eps = float(f.get_float(p + "attention.layer_norm_rms_epsilon"));
  if (!(hp.rms_eps > 0.0f && hp.rms_eps < 1.0f))
    fail(ErrorCode::malformed_file, "{}: layer_norm_rms_epsilon {} is outside (0, 1)", f.name(), hp.rms_eps);

  const float rope_base = float(f.get_float_or(p + "rope.freq_base", 10000.0));
  if (!(rope_base > 1.0f)) fail(ErrorCode::malformed_file, "{}: rope.freq_base {} must be > 1", f.name(), rope_base);
  float rope_scale = 1.0f;
  if (const auto type = f.find_string(p + "rope.scaling.type"); type && *type != "none" && *type != "linear")
    fail(ErrorCode::unsupported, "{}: rope scaling type '{}' is not supported", f.name(), *type);
  const double factor = f.get_float_or(p + "rope.scaling.factor", f.get_float_or(p + "rope.scale_linear", 0.0));
  if (factor != 0.0) {
    if (!(factor > 0.0)) fail(ErrorCode::malformed_file, "{}: rope scaling factor {} must be > 0", f.name(), factor);
    rope_scale = float(1.0 / factor);
  }

  // Gemma 3's query scaling is 1/sqrt(head size), except the 27B model whose
  // config scales by 1/sqrt(n_embd / n_head) (Google's gemma_pytorch config).
  const bool gemma3_27b = arch_name == "gemma3" && hp.n_layer == 62;
  hp.attention_scale = float(1.0 / std::sqrt(double(gemma3_27b ? hp.n_embd / hp.n_head : hp.head_dim_k)));

  int window = 0;
  if (hp.arch->swa_pattern > 0) window = int(get_count(f, p + "attention.sliding_window", int64_t(1) << 24));
  const float swa_base = float(f.get_float_or(p + "rope.freq_base_swa", hp.arch->swa_rope_base));
  hp.layers.resize(size_t(hp.n_layer));
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerParams& layer = hp.layers[size_t(il)];
    const int n = hp.arch->swa_pattern;
    layer.sliding = n > 0 && il % n < n - 1;
    layer.window = layer.sliding ? window : 0;
    layer.rope_base = layer.sliding ? swa_base : rope_base;
    layer.rope_scale = layer.sliding ? 1.0f : rope_scale;
  }
  return hp;
}

}  // namespace ember::model
