// config.json and the architecture table of the converter (hf_config.hpp).
#include "convert/hf_config.hpp"

#include <algorithm>
#include <cstdint>

#include "common/fail.hpp"

namespace ember::convert {

namespace {

struct ArchName {
  const char* hf;
  Arch arch;
};
constexpr ArchName kArchs[] = {
    {"LlamaForCausalLM", Arch::llama},
    {"MistralForCausalLM", Arch::llama},
    {"Gemma3ForCausalLM", Arch::gemma3},
    {"Gemma3ForConditionalGeneration", Arch::gemma3},
    {"Qwen2ForCausalLM", Arch::qwen2},
    {"Qwen3ForCausalLM", Arch::qwen3},
    {"Qwen3MoeForCausalLM", Arch::qwen3moe},
    {"Gemma2ForCausalLM", Arch::gemma2},
    {"GraniteForCausalLM", Arch::granite},
    {"Olmo2ForCausalLM", Arch::olmo2},
    {"Phi3ForCausalLM", Arch::phi3},
};

}  // namespace

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::llama: return "llama";
    case Arch::gemma3: return "gemma3";
    case Arch::qwen2: return "qwen2";
    case Arch::qwen3: return "qwen3";
    case Arch::qwen3moe: return "qwen3moe";
    case Arch::gemma2: return "gemma2";
    case Arch::granite: return "granite";
    case Arch::olmo2: return "olmo2";
    case Arch::phi3: return "phi3";
  }
  return "?";
}

std::optional<Arch> find_arch(std::string_view hf_class) {
  for (const ArchName& a : kArchs)
    if (hf_class == a.hf) return a.arch;
  return std::nullopt;
}

std::string supported_list() {
  std::string s;
  for (const ArchName& a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a.hf);
  return s;
}

Config::Config(const std::string& path) : path_(path) {
  const json::Value root = json::parse_file(path);
  members_ = root.as_object(path);
  if (const json::Value* text = root.find("text_config"); text && text->is_object())
    for (const auto& m : text->as_object(path + ": text_config")) members_.push_back(m);
}

const json::Value* Config::find(std::string_view key) const {
  // A null member counts as absent (the class default, added by add_defaults, then applies).
  const json::Value* found = nullptr;
  for (const auto& [k, v] : members_)
    if (k == key && !v.is_null()) found = &v;
  return found;
}

std::string Config::what(std::string_view key) const { return fmt::format("{}: \"{}\"", path_, key); }

int64_t Config::get_int(std::string_view key) const {
  const json::Value* v = find(key);
  if (!v) fail(ErrorCode::malformed_file, "{}: missing \"{}\"", path_, key);
  return v->as_int(what(key));
}

std::optional<int64_t> Config::find_int(std::string_view key) const {
  const json::Value* v = find(key);
  return v ? std::optional<int64_t>(v->as_int(what(key))) : std::nullopt;
}

std::optional<double> Config::find_double(std::string_view key) const {
  const json::Value* v = find(key);
  return v ? std::optional<double>(v->as_double(what(key))) : std::nullopt;
}

void Config::add_defaults(std::initializer_list<std::pair<const char*, json::Value>> defaults) {
  json::Object merged;
  for (const auto& [k, v] : defaults)
    if (!find(k)) merged.emplace_back(k, v);
  members_.insert(members_.begin(), merged.begin(), merged.end());
}

// transformers' config class defaults (LlamaConfig, MistralConfig, GraniteConfig,
// Qwen2Config, Qwen3Config, Qwen3MoeConfig, Olmo2Config, Gemma2Config, Gemma3TextConfig)
// for the keys the converter reads.
void add_class_defaults(Config& c, const std::string& hf_arch, Arch arch) {
  using json::Value;
  auto i = [](int64_t v) { return Value::make_integer(v); };
  auto f = [](double v) { return Value::make_number(v); };
  const bool mistral = hf_arch == "MistralForCausalLM";
  switch (arch) {
    case Arch::gemma3:
      c.add_defaults({{"vocab_size", i(262208)}, {"hidden_size", i(2304)}, {"intermediate_size", i(9216)},
                      {"num_hidden_layers", i(26)}, {"num_attention_heads", i(8)}, {"num_key_value_heads", i(4)},
                      {"head_dim", i(256)}, {"max_position_embeddings", i(131072)}, {"rms_norm_eps", f(1e-6)},
                      {"rope_theta", f(1000000.0)}, {"sliding_window", i(4096)}});
      return;
    case Arch::gemma2:
      c.add_defaults({{"vocab_size", i(256000)}, {"hidden_size", i(2304)}, {"intermediate_size", i(9216)},
                      {"num_hidden_layers", i(26)}, {"num_attention_heads", i(8)}, {"num_key_value_heads", i(4)},
                      {"head_dim", i(256)}, {"max_position_embeddings", i(8192)}, {"rms_norm_eps", f(1e-6)},
                      {"rope_theta", f(10000.0)}, {"attn_logit_softcapping", f(50.0)},
                      {"final_logit_softcapping", f(30.0)}, {"sliding_window", i(4096)}});
      return;
    case Arch::llama:
    case Arch::granite:
      c.add_defaults({{"vocab_size", i(32000)}, {"hidden_size", i(4096)},
                      {"intermediate_size", i(mistral ? 14336 : 11008)}, {"num_hidden_layers", i(32)},
                      {"num_attention_heads", i(32)}, {"max_position_embeddings", i(mistral ? 131072 : 2048)},
                      {"rms_norm_eps", f(1e-6)}, {"rope_theta", f(10000.0)}});
      if (arch == Arch::granite)
        c.add_defaults({{"embedding_multiplier", f(1.0)}, {"logits_scaling", f(1.0)}, {"residual_multiplier", f(1.0)},
                        {"attention_multiplier", f(1.0)}});
      break;
    case Arch::olmo2:
      c.add_defaults({{"vocab_size", i(50304)}, {"hidden_size", i(4096)}, {"intermediate_size", i(11008)},
                      {"num_hidden_layers", i(32)}, {"num_attention_heads", i(32)}, {"max_position_embeddings", i(2048)},
                      {"rms_norm_eps", f(1e-5)}, {"rope_theta", f(10000.0)}});
      break;
    case Arch::qwen3moe:
      c.add_defaults({{"vocab_size", i(151936)}, {"hidden_size", i(2048)}, {"intermediate_size", i(6144)},
                      {"num_hidden_layers", i(24)}, {"num_attention_heads", i(32)}, {"num_key_value_heads", i(4)},
                      {"max_position_embeddings", i(32768)}, {"rms_norm_eps", f(1e-6)}, {"rope_theta", f(10000.0)},
                      {"num_experts", i(128)}, {"num_experts_per_tok", i(8)}, {"moe_intermediate_size", i(768)}});
      break;
    case Arch::phi3:
      c.add_defaults({{"vocab_size", i(32064)}, {"hidden_size", i(3072)}, {"intermediate_size", i(8192)},
                      {"num_hidden_layers", i(32)}, {"num_attention_heads", i(32)}, {"max_position_embeddings", i(4096)},
                      {"original_max_position_embeddings", i(4096)}, {"rms_norm_eps", f(1e-5)},
                      {"rope_theta", f(10000.0)}});
      break;
    case Arch::qwen2:
    case Arch::qwen3:
      c.add_defaults({{"vocab_size", i(151936)}, {"hidden_size", i(4096)}, {"intermediate_size", i(22016)},
                      {"num_hidden_layers", i(32)}, {"num_attention_heads", i(32)}, {"max_position_embeddings", i(32768)},
                      {"rms_norm_eps", f(1e-6)}, {"rope_theta", f(10000.0)}});
      if (arch == Arch::qwen3) c.add_defaults({{"head_dim", i(128)}});
      break;
  }
  const int64_t heads = c.get_int("num_attention_heads");
  if (mistral) c.add_defaults({{"num_key_value_heads", i(8)}});
  c.add_defaults({{"num_key_value_heads", i(heads)}});
  // LlamaConfig computes head_dim; MistralConfig, GraniteConfig and Qwen2Config leave it None.
  if (arch == Arch::llama && !mistral)
    c.add_defaults({{"head_dim", i(c.get_int("hidden_size") / std::max<int64_t>(heads, 1))}});
}

uint32_t to_u32(int64_t v, std::string_view what) {
  if (v < 0 || v > int64_t(UINT32_MAX)) fail(ErrorCode::malformed_file, "{} is {}, out of range", what, v);
  return uint32_t(v);
}

std::optional<json::Value> read_json_if(const std::filesystem::path& path) {
  if (!std::filesystem::is_regular_file(path)) return std::nullopt;
  return json::parse_file(path.string());
}

}  // namespace ember::convert
