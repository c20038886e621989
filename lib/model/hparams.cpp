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

  // Gemma's query scaling is 1/sqrt(head size), except the 27B models whose
  // config scales by 1/sqrt(n_embd / n_head) (Google's gemma_pytorch config).
  const bool gemma_27b = (arch_name == "gemma3" && hp.n_layer == 62) || (arch_name == "gemma2" && hp.n_layer == 46);
  hp.attention_scale = float(1.0 / std::sqrt(double(gemma_27b ? hp.n_embd / hp.n_head : hp.head_dim_k)));
  if (hp.arch->scale_embeddings) hp.embedding_scale = std::sqrt(float(hp.n_embd));
  if (hp.arch->granite_scales) {
    // Required, as llama.cpp requires them; attention.scale 0 means the default.
    const auto positive = [&](const std::string& key) {
      const float v = float(f.get_float(key));
      if (!(v > 0.0f) || !std::isfinite(v))
        fail(ErrorCode::malformed_file, "{}: metadata key '{}' = {} must be a positive number", f.name(), key, v);
      return v;
    };
    hp.embedding_scale = positive(p + "embedding_scale");
    hp.residual_scale = positive(p + "residual_scale");
    hp.logit_scale = 1.0f / positive(p + "logit_scale");
    if (const float s = float(f.get_float(p + "attention.scale")); s != 0.0f) {
      if (!(s > 0.0f) || !std::isfinite(s))
        fail(ErrorCode::malformed_file, "{}: metadata key '{}' = {} must be >= 0", f.name(), p + "attention.scale", s);
      hp.attention_scale = s;
    }
  }
  if (hp.arch->softcaps) {
    // Gemma 2's published values when the file has none (as llama.cpp).
    hp.attn_softcap = float(f.get_float_or(p + "attn_logit_softcapping", 50.0));
    hp.final_softcap = float(f.get_float_or(p + "final_logit_softcapping", 30.0));
    if (!(hp.attn_softcap > 0.0f) || !(hp.final_softcap > 0.0f) || !std::isfinite(hp.attn_softcap) ||
        !std::isfinite(hp.final_softcap))
      fail(ErrorCode::malformed_file, "{}: soft-capping values {} and {} must be positive", f.name(), hp.attn_softcap,
           hp.final_softcap);
  }
  hp.rope_mscale = float(f.get_float_or(p + "rope.scaling.attn_factor", 1.0));
  if (!(hp.rope_mscale > 0.0f) || !std::isfinite(hp.rope_mscale))
    fail(ErrorCode::malformed_file, "{}: rope.scaling.attn_factor {} must be positive", f.name(), hp.rope_mscale);
  hp.n_ctx_orig = f.find(p + "rope.scaling.original_context_length")
                      ? get_count(f, p + "rope.scaling.original_context_length", int64_t(1) << 24)
                      : hp.n_ctx_train;

  // Never an error here (the tokenizer reports a bad id): anything but an id in the
  // vocabulary leaves -1, and quantized caches then store keys as they are.
  if (const gguf::Value* bos = f.find("tokenizer.ggml.bos_token_id"); bos && bos->is_integer()) {
    const int64_t id = bos->as_int("tokenizer.ggml.bos_token_id");
    hp.bos_token = id >= 0 && id < hp.n_vocab ? int32_t(id) : -1;
  }

  if (hp.arch->moe) {
    hp.n_expert = int(get_count(f, p + "expert_count", 1 << 12));
    hp.n_expert_used = int(get_count(f, p + "expert_used_count", hp.n_expert));
    hp.n_ff_exp = f.find(p + "expert_feed_forward_length")
                      ? get_count(f, p + "expert_feed_forward_length", 1 << 22)
                      : hp.n_ff / hp.n_expert_used;
    if (hp.n_ff_exp <= 0)
      fail(ErrorCode::malformed_file, "{}: expert feed-forward length is 0", f.name());
    hp.expert_weights_norm = f.get_bool_or(p + "expert_weights_norm", true);
  }

  int window = 0;
  if (hp.arch->swa_pattern > 0)
    window = hp.arch->swa_default_window > 0 && !f.find(p + "attention.sliding_window")
                 ? hp.arch->swa_default_window
                 : int(get_count(f, p + "attention.sliding_window", int64_t(1) << 24));
  // Sliding layers keep the global rope unless the family has its own base for them.
  const bool swa_own_rope = hp.arch->swa_rope_base > 0.0f;
  const float swa_base = swa_own_rope ? float(f.get_float_or(p + "rope.freq_base_swa", hp.arch->swa_rope_base))
                                      : float(f.get_float_or(p + "rope.freq_base_swa", rope_base));
  hp.layers.resize(size_t(hp.n_layer));
  for (int il = 0; il < hp.n_layer; ++il) {
    LayerParams& layer = hp.layers[size_t(il)];
    const int n = hp.arch->swa_pattern;
    layer.sliding = n > 0 && il % n < n - 1;
    layer.window = layer.sliding ? window : 0;
    layer.rope_base = layer.sliding ? swa_base : rope_base;
    layer.rope_scale = layer.sliding && swa_own_rope ? 1.0f : rope_scale;
  }
  return hp;
}

}  // namespace ember::model
