// Hugging Face checkpoint -> GGUF (include/ember/convert.hpp).
//
// What is written follows llama.cpp's convert_hf_to_gguf.py (its Gemma3Model and
// LlamaModel classes, the SentencePiece vocabulary and gguf-py's SpecialVocab); the rules
// are restated in docs/convert.md. The order of work:
//   1. config.json (a "text_config" member is merged over the top level, as the converter does);
//   2. the tokenizer: tokenizer.model's pieces, then added_tokens.json and
//      tokenizer_config.json's added_tokens_decoder over them, padding to the config's
//      vocab_size; special token ids and add_* flags from tokenizer_config.json (names
//      resolved through tokenizer.json's added_tokens) and config.json's *_token_id;
//   3. the architecture's metadata;
//   4. the tensors, file by file and name by name, renamed, transformed in F32 and stored
//      in the chosen type.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "common/fail.hpp"
#include "common/fp16.hpp"
#include "common/json.hpp"
#include "common/temp_file.hpp"
#include "convert/safetensors.hpp"
#include "convert/spm_model.hpp"
#include "ember/convert.hpp"
#include "gguf/gguf.hpp"

namespace ember {

namespace fs = std::filesystem;
using quant::DType;

namespace {

enum class Arch { llama, granite, gemma2, gemma3, qwen2, qwen3, qwen3moe, olmo2, phi3 };

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

std::string supported_list() {
  std::string s;
  for (const ArchName& a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a.hf);
  return s;
}

// config.json with a text_config merged over the top level.
class Config {
 public:
  explicit Config(const std::string& path) : path_(path) {
    const json::Value root = json::parse_file(path);
    const json::Object& top = root.as_object(path);
    members_ = top;
    if (const json::Value* text = root.find("text_config"); text && text->is_object())
      for (const auto& m : text->as_object(path + ": text_config")) members_.push_back(m);
  }
  const json::Value* find(std::string_view key) const {
    const json::Value* found = nullptr;
    for (const auto& [k, v] : members_)
      if (k == key) found = &v;
    return found && !found->is_null() ? found : nullptr;
  }
  std::string what(std::string_view key) const { return fmt::format("{}: \"{}\"", path_, key); }
  int64_t get_int(std::string_view key) const {
    const json::Value* v = find(key);
    if (!v) fail(ErrorCode::malformed_file, "{}: missing \"{}\"", path_, key);
    return v->as_int(what(key));
  }
  std::optional<int64_t> find_int(std::string_view key) const {
    const json::Value* v = find(key);
    return v ? std::optional<int64_t>(v->as_int(what(key))) : std::nullopt;
  }
  std::optional<double> find_double(std::string_view key) const {
    const json::Value* v = find(key);
    return v ? std::optional<double>(v->as_double(what(key))) : std::nullopt;
  }
  const std::string& path() const { return path_; }

  // The converter reads transformers' parsed config, in which every attribute of the
  // model's config class is present: its defaults fill the keys config.json leaves out.
  void add_defaults(std::initializer_list<std::pair<const char*, json::Value>> defaults) {
    json::Object merged;
    for (const auto& [k, v] : defaults)
      if (!find(k)) merged.emplace_back(k, v);
    members_.insert(members_.begin(), merged.begin(), merged.end());
  }

 private:
  std::string path_;
  json::Object members_;
};

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

std::optional<json::Value> read_json_if(const fs::path& path) {
  if (!fs::is_regular_file(path)) return std::nullopt;
  return json::parse_file(path.string());
}

// ---- Tokenizer ----------------------------------------------------------------------

constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;

struct Vocab {
  std::string model = "llama";    // tokenizer.ggml.model: llama (SentencePiece) or gpt2 (byte-level BPE)
  std::string pre = "default";    // tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<float> scores;      // SentencePiece only
  std::vector<int32_t> types;
  std::vector<std::string> merges;   // BPE only
};

// llama.cpp's does_token_look_special.
bool looks_special(std::string_view t) {
  auto wrapped = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.substr(0, open.size()) == open &&
           t.substr(t.size() - close.size()) == close;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<unused", ">");
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

// `phi3`: Phi3MiniModel's own variant of the rules: added tokens (tokenizer_config.json's
// added_tokens_decoder, then tokenizer.json's added_tokens) are user-defined, or control
// when `special`, without the look-special test or the space replacement.
Vocab sentencepiece_vocab(const fs::path& dir, const Config& config, std::vector<std::string>& warnings,
                          bool phi3 = false) {
  const fs::path model = dir / "tokenizer.model";
  if (!fs::is_regular_file(model)) {
    const bool json_only = fs::is_regular_file(dir / "tokenizer.json");
    fail(ErrorCode::unsupported,
         "convert: '{}' has no tokenizer.model{}; ember converts SentencePiece vocabularies only (a tokenizer.json "
         "BPE vocabulary, as Llama 3's, is not converted yet)",
         dir.string(), json_only ? " (only tokenizer.json)" : "");
  }
  const std::vector<convert::SpmPiece> pieces = convert::read_spm_model(model.string());
  const int64_t n_vocab = config.find_int("vocab_size").value_or(int64_t(pieces.size()));
  if (n_vocab < int64_t(pieces.size()))
    fail(ErrorCode::malformed_file, "convert: config.json's vocab_size {} is smaller than tokenizer.model's {} pieces",
         n_vocab, pieces.size());
  Vocab v;
  v.tokens.resize(size_t(n_vocab));
  v.scores.assign(size_t(n_vocab), -10000.0f);
  v.types.assign(size_t(n_vocab), kUnused);
  for (int64_t i = 0; i < n_vocab; ++i) v.tokens[size_t(i)] = fmt::format("[PAD{}]", i);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const convert::SpmPiece& p = pieces[i];
    v.tokens[i] = p.piece;
    v.scores[i] = p.score;
    // SentencePiece's IsUnknown/IsControl/IsUnused/IsByte; user-defined pieces count as normal.
    v.types[i] = (p.type == kUnknown || p.type == kControl || p.type == kUnused || p.type == kByte) ? p.type : kNormal;
  }
  if (const auto added = read_json_if(dir / "added_tokens.json")) {
    for (const auto& [content, id_value] : added->as_object("added_tokens.json")) {
      const int64_t id = id_value.as_int("added_tokens.json: \"" + content + "\"");
      if (id < 0 || id >= n_vocab) {
        warnings.push_back(fmt::format("added_tokens.json: token {} ('{}') is outside the vocabulary; ignored", id, content));
        continue;
      }
      v.tokens[size_t(id)] = content;
      v.scores[size_t(id)] = -1000.0f;
      v.types[size_t(id)] = kUserDefined;
    }
  }
  // One added token over the pieces: `what` names its source for messages.
  auto add = [&](int64_t id, std::string token, bool special, const char* what) {
    if (id < 0 || id >= n_vocab) {
      if (phi3) fail(ErrorCode::malformed_file, "{}: added token {} is outside the vocabulary of {}", what, id, n_vocab);
      warnings.push_back(fmt::format("{}: added token {} is outside the vocabulary; ignored", what, id));
      return;
    }
    if (v.types[size_t(id)] != kUnused && v.tokens[size_t(id)] != token)
      warnings.push_back(fmt::format("token {}: '{}' replaced by '{}' ({})", id, v.tokens[size_t(id)], token, what));
    if (special || (!phi3 && looks_special(token))) {
      v.types[size_t(id)] = kControl;
    } else {
      if (!phi3) token = replace_all(token, "\xE2\x96\x81", " ");   // pre-normalised user-defined spaces
      v.types[size_t(id)] = kUserDefined;
    }
    v.scores[size_t(id)] = -1000.0f;
    v.tokens[size_t(id)] = std::move(token);
  };
  auto is_special = [](const json::Value& data) {
    const json::Value* special = data.find("special");
    return special && special->is_bool() && special->as_bool("special");
  };
  if (const auto cfg = read_json_if(dir / "tokenizer_config.json")) {
    if (const json::Value* decoder = cfg->find("added_tokens_decoder")) {
      for (const auto& [key, data] : decoder->as_object("tokenizer_config.json: added_tokens_decoder")) {
        char* end = nullptr;
        const long long id = std::strtoll(key.c_str(), &end, 10);
        if (key.empty() || *end != '\0')
          fail(ErrorCode::malformed_file, "tokenizer_config.json: added_tokens_decoder key '{}' is not a number", key);
        const json::Value* content_value = data.find("content");
        if (!content_value) fail(ErrorCode::malformed_file, "tokenizer_config.json: added token {} has no content", key);
        add(id, content_value->as_string("tokenizer_config.json: added token content"), is_special(data),
            "tokenizer_config.json");
      }
    }
  }
  if (phi3)
    if (const auto tok = read_json_if(dir / "tokenizer.json"))
      if (const json::Value* list = tok->find("added_tokens"); list && list->is_array())
        for (const json::Value& t : list->as_array("added_tokens")) {
          const json::Value* id = t.find("id");
          const json::Value* content = t.find("content");
          if (!id || !content) fail(ErrorCode::malformed_file, "tokenizer.json: an added token without id or content");
          add(id->as_int("added token id"), content->as_string("added token content"), is_special(t), "tokenizer.json");
        }
  return v;
}

// The pre-tokenizer's name from tokenizer.json's own description. llama.cpp's converter
// names it by hashing the ids its Python tokenizer gives for a fixed text; the three
// splits below are the ones whose hashes it maps to these names for GPT-2, Llama 3 and
// Qwen 2 / 2.5 / 3 (which all use Qwen 2's).
std::string bpe_pre_name(const json::Value& tokenizer) {
  static constexpr std::string_view kLlama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static constexpr std::string_view kQwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const json::Value* pre = tokenizer.find("pre_tokenizer");
  auto type_of = [](const json::Value* v) -> std::string {
    const json::Value* t = v ? v->find("type") : nullptr;
    return t && t->is_string() ? t->as_string("type") : "";
  };
  auto flag = [](const json::Value& v, const char* key, bool fallback) {
    const json::Value* f = v.find(key);
    return f && f->is_bool() ? f->as_bool(key) : fallback;
  };
  if (type_of(pre) == "ByteLevel" && flag(*pre, "use_regex", true) && !flag(*pre, "add_prefix_space", false))
    return "gpt-2";
  if (type_of(pre) == "Sequence") {
    const json::Value* list = pre->find("pretokenizers");
    if (list && list->is_array() && list->as_array("pretokenizers").size() == 2) {
      const json::Value& split = list->as_array("pretokenizers")[0];
      const json::Value& bytes = list->as_array("pretokenizers")[1];
      const json::Value* pattern = split.find("pattern");
      const json::Value* regex = pattern ? pattern->find("Regex") : nullptr;
      if (type_of(&split) == "Split" && regex && regex->is_string() && type_of(&bytes) == "ByteLevel" &&
          !flag(bytes, "use_regex", true)) {
        if (regex->as_string("Regex") == kLlama3) return "llama-bpe";
        if (regex->as_string("Regex") == kQwen2) return "qwen2";
      }
    }
  }
  fail(ErrorCode::unsupported,
       "convert: tokenizer.json's pre-tokenizer ({}) is not one ember recognises (GPT-2's byte-level split, Llama 3's "
       "and Qwen 2's regular expressions)",
       type_of(pre).empty() ? std::string("none") : type_of(pre));
}

// llama.cpp's get_vocab_base and SpecialVocab's merges, from tokenizer.json.
Vocab bpe_vocab(const fs::path& dir, const Config& config, std::vector<std::string>& warnings) {
  const auto tok = read_json_if(dir / "tokenizer.json");
  if (!tok)
    fail(ErrorCode::unsupported, "convert: '{}' has neither tokenizer.model nor tokenizer.json", dir.string());
  const json::Value* model = tok->find("model");
  const json::Value* type = model ? model->find("type") : nullptr;
  if (!type || !type->is_string() || type->as_string("type") != "BPE")
    fail(ErrorCode::unsupported, "convert: tokenizer.json's model is not BPE; ember converts byte-level BPE and SentencePiece");
  const json::Value* vocab_json = model->find("vocab");
  if (!vocab_json) fail(ErrorCode::malformed_file, "tokenizer.json: model without a vocab");
  Vocab v;
  v.model = "gpt2";
  v.pre = bpe_pre_name(*tok);
  std::map<int64_t, std::string> by_id;
  std::map<int64_t, bool> added;   // id -> special
  for (const auto& [text, id] : vocab_json->as_object("tokenizer.json: vocab")) by_id[id.as_int("vocab id")] = text;
  if (const json::Value* list = tok->find("added_tokens"); list && list->is_array())
    for (const json::Value& t : list->as_array("added_tokens")) {
      const json::Value* id = t.find("id");
      const json::Value* content = t.find("content");
      if (!id || !content) fail(ErrorCode::malformed_file, "tokenizer.json: an added token without id or content");
      const json::Value* special = t.find("special");
      by_id[id->as_int("added token id")] = content->as_string("added token content");
      added[id->as_int("added token id")] = special && special->is_bool() && special->as_bool("special");
    }
  const int64_t n_vocab = config.get_int("vocab_size");
  if (!by_id.empty() && (by_id.begin()->first < 0 || by_id.rbegin()->first >= n_vocab))
    fail(ErrorCode::malformed_file, "convert: tokenizer.json has token id {} outside config.json's vocab_size {}",
         by_id.begin()->first < 0 ? by_id.begin()->first : by_id.rbegin()->first, n_vocab);
  for (int64_t i = 0; i < n_vocab; ++i) {
    const auto t = by_id.find(i);
    if (t == by_id.end()) {
      v.tokens.push_back(fmt::format("[PAD{}]", i));
      v.types.push_back(kUnused);
      continue;
    }
    std::string token = t->second;
    int32_t token_type = kNormal;
    if (const auto a = added.find(i); a != added.end()) {
      if (a->second || looks_special(token)) {
        token_type = kControl;
      } else {
        token = replace_all(token, "\xE2\x96\x81", " ");
        token_type = kUserDefined;
      }
    }
    v.tokens.push_back(std::move(token));
    v.types.push_back(token_type);
  }
  if (const json::Value* merges = model->find("merges"); merges && merges->is_array()) {
    for (const json::Value& m : merges->as_array("merges")) {
      if (m.is_string()) {
        v.merges.push_back(m.as_string("merge"));
        continue;
      }
      const json::Array& pair = m.as_array("tokenizer.json: merge");
      if (pair.size() != 2) fail(ErrorCode::malformed_file, "tokenizer.json: a merge that is not a pair");
      // Spaces inside a part are written as U+0120, as SpecialVocab does.
      v.merges.push_back(replace_all(pair[0].as_string("merge"), " ", "\xC4\xA0") + " " +
                         replace_all(pair[1].as_string("merge"), " ", "\xC4\xA0"));
    }
  }
  if (v.merges.empty()) warnings.push_back("tokenizer.json has no merges: the vocabulary may not tokenize");
  return v;
}

// gguf-py's SpecialVocab (without merges): written in the order found.
struct SpecialTokens {
  std::vector<std::pair<std::string, uint32_t>> ids;   // type -> id
  std::vector<std::pair<std::string, bool>> add;       // add_<type>_token
  std::optional<std::string> chat_template;
};

SpecialTokens special_tokens(const fs::path& dir, int64_t n_vocab, std::vector<std::string>& warnings) {
  static constexpr const char* kTypes[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
  SpecialTokens s;
  auto set_id = [&](const std::string& type, const json::Value* id) {
    if (!id || !id->is_integer()) return;
    const int64_t v = id->as_int(type);
    if (v < 0) fail(ErrorCode::malformed_file, "convert: special token {} has the negative id {}", type, v);
    if (v >= n_vocab) {
      warnings.push_back(fmt::format("special token {} id {} is outside the vocabulary of {}; skipped", type, v, n_vocab));
      return;
    }
    for (const auto& [t, _] : s.ids)
      if (t == type) return;
    s.ids.emplace_back(type, uint32_t(v));
  };
  json::Array added_tokens;
  if (const auto tok = read_json_if(dir / "tokenizer.json"))
    if (const json::Value* a = tok->find("added_tokens"); a && a->is_array()) added_tokens = a->as_array("added_tokens");
  if (const auto cfg = read_json_if(dir / "tokenizer_config.json")) {
    const json::Value* tmpl = cfg->find("chat_template");
    std::optional<json::Value> alt;
    if (!tmpl) {
      alt = read_json_if(dir / "chat_template.json");
      if (alt) tmpl = alt->find("chat_template");
    }
    if (tmpl && tmpl->is_string()) s.chat_template = tmpl->as_string("chat_template");
    else if (tmpl && !tmpl->is_null())
      warnings.push_back("chat_template is not a single string (named templates are not converted); left out");
    for (const char* type : kTypes) {
      if (const json::Value* add = cfg->find(fmt::format("add_{}_token", type)); add && add->is_bool())
        s.add.emplace_back(type, add->as_bool("add token"));
      const json::Value* entry = cfg->find(fmt::format("{}_token", type));
      std::string content;
      if (entry && entry->is_string()) {
        content = entry->as_string("token");
      } else if (entry && entry->is_object()) {
        const json::Value* c = entry->find("content");
        if (!c || !c->is_string()) continue;
        content = c->as_string("content");
      } else {
        continue;
      }
      for (const json::Value& t : added_tokens) {
        const json::Value* c = t.find("content");
        if (c && c->is_string() && c->as_string("content") == content) {
          set_id(type, t.find("id"));
          break;
        }
      }
    }
  }
  if (const auto config = read_json_if(dir / "config.json"))
    for (const char* type : kTypes) set_id(type, config->find(fmt::format("{}_token_id", type)));
  return s;
}

void add_tokenizer(gguf::Writer& w, const Vocab& v, const SpecialTokens& s) {
  w.add_string("tokenizer.ggml.model", v.model);
  w.add_string("tokenizer.ggml.pre", v.pre);
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  if (v.model == "llama") w.add_float32_array("tokenizer.ggml.scores", v.scores);
  w.add_int32_array("tokenizer.ggml.token_type", v.types);
  if (!v.merges.empty()) w.add_string_array("tokenizer.ggml.merges", v.merges);
  static const std::map<std::string, std::string> kIdKeys = {
      {"bos", "bos_token_id"},         {"eos", "eos_token_id"},       {"unk", "unknown_token_id"},
      {"sep", "seperator_token_id"},   {"pad", "padding_token_id"},   {"mask", "mask_token_id"}};
  for (const auto& [type, id] : s.ids)
    if (const auto k = kIdKeys.find(type); k != kIdKeys.end()) w.add_uint32("tokenizer.ggml." + k->second, id);
  for (const auto& [type, add] : s.add)
    if (type == "bos" || type == "eos") w.add_bool(fmt::format("tokenizer.ggml.add_{}_token", type), add);
  if (s.chat_template) w.add_string("tokenizer.chat_template", *s.chat_template);
}

// ---- Tensors ------------------------------------------------------------------------

// HF name (after the language_model. prefix is dropped) -> GGUF name; empty when unknown.
std::string gguf_name(Arch arch, const std::string& name) {
  static const std::map<std::string, std::string> kTop = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  if (const auto t = kTop.find(name); t != kTop.end()) return t->second;
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return {};
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return {};
  const std::string layer = name.substr(prefix.size(), dot - prefix.size());
  if (layer.empty() || !std::all_of(layer.begin(), layer.end(), [](char c) { return c >= '0' && c <= '9'; })) return {};
  std::string rest = name.substr(dot + 1);
  std::string suffix;
  for (const char* s : {".weight", ".bias"})
    if (rest.size() > std::strlen(s) && rest.compare(rest.size() - std::strlen(s), std::string::npos, s) == 0) {
      suffix = s;
      rest.resize(rest.size() - suffix.size());
    }
  if (suffix.empty()) return {};
  static const std::map<std::string, std::string> kCommon = {
      {"input_layernorm", "attn_norm"},      {"self_attn.q_proj", "attn_q"},   {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},        {"self_attn.o_proj", "attn_output"},
      {"mlp.gate_proj", "ffn_gate"},         {"mlp.up_proj", "ffn_up"},        {"mlp.down_proj", "ffn_down"},
  };
  static const std::map<std::string, std::string> kLlama = {{"post_attention_layernorm", "ffn_norm"}};
  static const std::map<std::string, std::string> kQwen = {{"post_attention_layernorm", "ffn_norm"},
                                                           {"self_attn.q_norm", "attn_q_norm"},
                                                           {"self_attn.k_norm", "attn_k_norm"}};
  static const std::map<std::string, std::string> kGemma3 = {
      {"post_attention_layernorm", "post_attention_norm"}, {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"},     {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"}};
  static const std::map<std::string, std::string> kGemma2 = {
      {"post_attention_layernorm", "post_attention_norm"}, {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"}};
  static const std::map<std::string, std::string> kOlmo2 = {
      {"post_attention_layernorm", "post_attention_norm"}, {"post_feedforward_layernorm", "post_ffw_norm"},
      {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"}};
  static const std::map<std::string, std::string> kQwenMoe = {
      {"post_attention_layernorm", "ffn_norm"}, {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"}, {"mlp.gate", "ffn_gate_inp"}, {"mlp.experts.down_proj", "ffn_down_exps"},
      {"mlp.experts.gate_proj", "ffn_gate_exps"}, {"mlp.experts.up_proj", "ffn_up_exps"}};
  static const std::map<std::string, std::string> kPhi3 = {{"post_attention_layernorm", "ffn_norm"},
                                                           {"self_attn.qkv_proj", "attn_qkv"},
                                                           {"mlp.gate_up_proj", "ffn_up"}};
  const std::map<std::string, std::string>* own = &kQwen;
  switch (arch) {
    case Arch::llama: case Arch::granite: own = &kLlama; break;
    case Arch::gemma2: own = &kGemma2; break;
    case Arch::gemma3: own = &kGemma3; break;
    case Arch::olmo2: own = &kOlmo2; break;
    case Arch::qwen3moe: own = &kQwenMoe; break;
    case Arch::qwen2: case Arch::qwen3: own = &kQwen; break;
    case Arch::phi3: own = &kPhi3; break;
  }
  std::string base;
  if (const auto c = kCommon.find(rest); c != kCommon.end()) base = c->second;
  else if (const auto o = own->find(rest); o != own->end()) base = o->second;
  else return {};
  return "blk." + layer + "." + base + suffix;
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

std::vector<float> to_f32(const convert::StTensor& t) {
  std::vector<float> out(size_t(t.n_elements));
  const std::byte* p = t.data;
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype) {
      case convert::StDType::f32: std::memcpy(&out[i], p + 4 * i, 4); break;
      case convert::StDType::f16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = fp16_to_fp32(h);
        break;
      }
      case convert::StDType::bf16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = bf16_to_fp32(h);
        break;
      }
      case convert::StDType::f64: {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        out[i] = float(d);
        break;
      }
      default:
        fail(ErrorCode::unsupported, "convert: tensor '{}' is {}; ember converts F32, F16, BF16 and F64 tensors", t.name,
             t.dtype_name);
    }
  }
  return out;
}

// llama.cpp's LlamaModel.permute: within each head, rows (j * half + i) move to (2 i + j),
// so that rope's pairs (i, i + half) of the checkpoint become adjacent.
std::vector<float> permute_heads(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t n_head,
                                 const std::string& name) {
  if (n_head <= 0 || rows % (2 * n_head) != 0)
    fail(ErrorCode::malformed_file, "convert: tensor '{}' has {} rows, not a multiple of 2 x {} heads", name, rows, n_head);
  const int64_t head = rows / n_head, half = head / 2;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < half; ++i)
        std::memcpy(&out[size_t((h * head + 2 * i + j) * cols)], &w[size_t((h * head + j * half + i) * cols)],
                    size_t(cols) * sizeof(float));
  return out;
}

// Stores `v` as `type` (F32, F16 or BF16) into `out`, which holds exactly its bytes.
void encode_into(const std::vector<float>& v, DType type, std::span<std::byte> out) {
  const size_t elem = type == DType::f32 ? 4 : 2;
  if (out.size() != v.size() * elem)
    fail(ErrorCode::internal, "convert: {} values for {} bytes of {}", v.size(), out.size(), quant::type_name(type));
  if (type == DType::f32) {
    std::memcpy(out.data(), v.data(), out.size());
    return;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = type == DType::f16 ? fp32_to_fp16(v[i]) : fp32_to_bf16(v[i]);
    std::memcpy(&out[2 * i], &h, 2);
  }
}

std::vector<std::byte> encode(const std::vector<float>& v, DType type) {
  std::vector<std::byte> out(v.size() * (type == DType::f32 ? 4 : 2));
  encode_into(v, type, out);
  return out;
}

// llama.cpp's Llama 3 rope factors (generate_extra_tensors), in float as the converter's torch code runs.
std::vector<float> llama3_rope_factors(const Config& c, const json::Value& scaling) {
  const double base = c.find_double("rope_theta").value_or(10000.0);
  const int64_t n_head = c.get_int("num_attention_heads");
  const int64_t dim = c.find_int("head_dim").value_or(c.get_int("hidden_size") / n_head);
  auto num = [&](const char* key, double fallback) {
    const json::Value* v = scaling.find(key);
    return v && v->is_number() ? v->as_double(key) : fallback;
  };
  const float factor = float(num("factor", 8.0));
  const float low = float(num("low_freq_factor", 1.0)), high = float(num("high_freq_factor", 4.0));
  // The converter reads original_max_position_embeddings from the top level of the config
  // only (8192 when absent there), not from rope_scaling where Llama 3.1's config has it.
  const float old_ctx = float(c.find_int("original_max_position_embeddings").value_or(8192));
  const float low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
  std::vector<float> factors;
  for (int64_t i = 0; i < dim; i += 2) {
    const float freq = 1.0f / std::pow(float(base), float(i) / float(dim));
    const float wavelen = float(2 * M_PI) / freq;
    if (wavelen < high_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      factors.push_back(factor);
    } else {
      const float smooth = (old_ctx / wavelen - low) / (high - low);
      factors.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
    }
  }
  return factors;
}

std::vector<std::string> safetensors_files(const fs::path& dir) {
  std::vector<std::string> files;
  if (const auto index = read_json_if(dir / "model.safetensors.index.json")) {
    const json::Value* map = index->find("weight_map");
    if (!map) fail(ErrorCode::malformed_file, "'{}': no weight_map", (dir / "model.safetensors.index.json").string());
    std::set<std::string> names;
    for (const auto& [tensor, file] : map->as_object("model.safetensors.index.json: weight_map")) {
      const std::string& f = file.as_string("weight_map: " + tensor);
      if (f.find('/') != std::string::npos || f == "..")
        fail(ErrorCode::malformed_file, "model.safetensors.index.json: shard '{}' is not a file name in the folder", f);
      names.insert(f);
    }
    for (const std::string& n : names) files.push_back((dir / n).string());
  } else {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) fail(ErrorCode::io, "convert: '{}' has no *.safetensors files", dir.string());
  return files;
}

}  // namespace

const char* to_string(ConvertType type) noexcept {
  switch (type) {
    case ConvertType::automatic: return "auto";
    case ConvertType::f32: return "F32";
    case ConvertType::f16: return "F16";
    case ConvertType::bf16: return "BF16";
  }
  return "?";
}

bool is_hf_checkpoint(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

ConvertReport convert_hf_checkpoint(const std::string& dir_name, const std::string& output,
                                    const ConvertOptions& options) {
  const fs::path dir(dir_name);
  if (!fs::is_directory(dir)) fail(ErrorCode::io, "convert: '{}' is not a directory", dir_name);
  if (!fs::is_regular_file(dir / "config.json"))
    fail(ErrorCode::io, "convert: '{}' has no config.json (not a Hugging Face checkpoint)", dir_name);
  TempFile temp(output, "convert");   // an unwritable folder fails here, before any work
  Config config((dir / "config.json").string());
  ConvertReport report;

  const json::Value* archs = config.find("architectures");
  if (!archs || !archs->is_array() || archs->as_array("architectures").empty())
    fail(ErrorCode::malformed_file, "{}: no \"architectures\" list", config.path());
  report.hf_architecture = archs->as_array("architectures")[0].as_string(config.what("architectures"));
  const ArchName* found = nullptr;
  for (const ArchName& a : kArchs)
    if (report.hf_architecture == a.hf) found = &a;
  if (!found)
    fail(ErrorCode::unsupported, "convert: '{}' is a {}; ember converts {}", dir_name, report.hf_architecture,
         supported_list());
  const Arch arch = found->arch;
  const std::string a = arch_name(arch);
  add_class_defaults(config, report.hf_architecture, arch);
  report.architecture = a;

  // Tensors first (cheap: headers only), so that the output type is known.
  std::vector<convert::SafetensorsFile> files;
  for (const std::string& f : safetensors_files(dir)) files.emplace_back(f);
  struct Item {
    const convert::StTensor* t;                     // the source (the first expert of a merged stack)
    std::string name;                               // GGUF
    std::vector<const convert::StTensor*> experts;  // a stack of experts' matrices, in expert order
  };
  std::vector<Item> items;
  std::set<DType> matrix_types;
  std::set<std::string> seen;
  // Mixture of experts: per layer, each expert's down/gate/up matrices, merged into one
  // [experts, rows, cols] tensor per kind once the layer's last one has been read (the
  // converter's order).
  const int64_t n_experts = arch == Arch::qwen3moe ? config.get_int("num_experts") : 0;
  std::map<std::string, std::map<std::string, std::map<int64_t, const convert::StTensor*>>> expert_parts;
  std::map<std::string, int64_t> expert_count;
  for (const convert::SafetensorsFile& f : files) {
    std::vector<const convert::StTensor*> sorted;
    for (const convert::StTensor& t : f.tensors()) sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(), [](auto* x, auto* y) { return x->name < y->name; });
    for (const convert::StTensor* t : sorted) {
      std::string name = t->name;
      if (ends_with(name, ".attention.masked_bias") || ends_with(name, ".attention.bias") ||
          ends_with(name, ".rotary_emb.inv_freq")) {
        ++report.skipped;
        continue;
      }
      if (arch == Arch::gemma2 && name == "lm_head.weight") {   // the converter skips it (tied)
        ++report.skipped;
        continue;
      }
      if (arch == Arch::qwen3moe && name.find(".mlp.experts.") != std::string::npos) {
        // model.layers.N.mlp.experts.E.KIND.weight
        const size_t e0 = name.find(".mlp.experts.") + std::strlen(".mlp.experts.");
        const size_t e1 = name.find('.', e0);
        const std::string layer_prefix = name.substr(0, e0 - std::strlen(".experts."));   // model.layers.N.mlp
        char* end = nullptr;
        const long long expert = e1 == std::string::npos ? -1 : std::strtoll(name.c_str() + e0, &end, 10);
        const std::string kind = e1 == std::string::npos ? "" : name.substr(e1 + 1);
        if (expert < 0 || expert >= n_experts || end != name.c_str() + e1 ||
            (kind != "down_proj.weight" && kind != "gate_proj.weight" && kind != "up_proj.weight"))
          fail(ErrorCode::malformed_file, "convert: expert tensor '{}' does not fit num_experts {}", name, n_experts);
        expert_parts[layer_prefix][kind][expert] = t;
        if (++expert_count[layer_prefix] == 3 * n_experts) {
          for (const char* k : {"down_proj.weight", "gate_proj.weight", "up_proj.weight"}) {
            const auto& parts = expert_parts[layer_prefix][k];
            if (int64_t(parts.size()) != n_experts)
              fail(ErrorCode::malformed_file, "convert: '{}' has {} of {} experts' {}", layer_prefix, parts.size(),
                   n_experts, k);
            Item item{parts.begin()->second, gguf_name(arch, layer_prefix + ".experts." + k), {}};
            for (const auto& [e, part] : parts) {
              if (part->shape != item.t->shape || part->dtype != item.t->dtype)
                fail(ErrorCode::malformed_file, "convert: the experts of '{}' differ in shape or type", layer_prefix);
              item.experts.push_back(part);
            }
            if (item.name.empty() || !seen.insert(item.name).second)
              fail(ErrorCode::malformed_file, "convert: cannot name the merged experts of '{}'", layer_prefix);
            matrix_types.insert(item.t->dtype == convert::StDType::f16    ? DType::f16
                                : item.t->dtype == convert::StDType::bf16 ? DType::bf16
                                                                          : DType::f32);
            items.push_back(std::move(item));
          }
        }
        continue;
      }
      if (arch == Arch::qwen2 || arch == Arch::qwen3 || arch == Arch::qwen3moe) {
        if (name.rfind("mlp", 0) == 0 || name.rfind("multi_modal_projector", 0) == 0 ||
            name.rfind("vision_model", 0) == 0 || name.rfind("audio_tower", 0) == 0) {
          ++report.skipped;
          continue;
        }
      }
      if (arch == Arch::gemma3) {
        if (name.rfind("language_model.", 0) == 0) {
          name = name.substr(std::strlen("language_model."));
        } else if (name.rfind("multi_modal_projector.", 0) == 0 || name.rfind("vision_tower.", 0) == 0 ||
                   name.rfind("multimodal_projector.", 0) == 0 || name.rfind("vision_model.", 0) == 0) {
          ++report.skipped;
          continue;
        }
      }
      std::string out = gguf_name(arch, name);
      if (out.empty())
        fail(ErrorCode::unsupported, "convert: tensor '{}' of '{}' has no GGUF name for {}", t->name, f.path(), a);
      if (!seen.insert(out).second) fail(ErrorCode::malformed_file, "convert: two source tensors map to '{}'", out);
      if (t->shape.size() >= 2) {
        if (t->dtype == convert::StDType::f16) matrix_types.insert(DType::f16);
        else if (t->dtype == convert::StDType::bf16) matrix_types.insert(DType::bf16);
        else matrix_types.insert(DType::f32);
      }
      items.push_back({t, std::move(out), {}});
    }
  }
  for (const auto& [layer, count] : expert_count)
    if (count != 3 * n_experts)
      fail(ErrorCode::malformed_file, "convert: '{}' has {} expert matrices, not 3 x {}", layer, count, n_experts);
  if (items.empty()) fail(ErrorCode::malformed_file, "convert: '{}' has no weights", dir_name);
  DType matrix_type = DType::f32;
  switch (options.type) {
    case ConvertType::automatic:
      matrix_type = matrix_types.size() == 1 ? *matrix_types.begin() : DType::f32;
      break;
    case ConvertType::f32: matrix_type = DType::f32; break;
    case ConvertType::f16: matrix_type = DType::f16; break;
    case ConvertType::bf16: matrix_type = DType::bf16; break;
    default: fail(ErrorCode::invalid_argument, "convert: unknown output type {}", int(options.type));
  }
  report.type = matrix_type == DType::f16 ? ConvertType::f16 : matrix_type == DType::bf16 ? ConvertType::bf16 : ConvertType::f32;
  const uint32_t file_type = matrix_type == DType::f32 ? 0 : matrix_type == DType::f16 ? 1 : 32;

  Vocab vocab;
  // Gemma needs tokenizer.model; OLMo 2 and Qwen 3 MoE (TextModel's default) read tokenizer.json
  // only; Llama, Granite, Qwen 2 and Qwen 3 try tokenizer.model first.
  const bool bpe_only = arch == Arch::olmo2 || arch == Arch::qwen3moe;
  bool phi3_bpe = false;   // Phi-3's converter: tokenizer_class GPT2Tokenizer means BPE, else SentencePiece
  if (arch == Arch::phi3)
    if (const auto cfg = read_json_if(dir / "tokenizer_config.json"))
      if (const json::Value* cls = cfg->find("tokenizer_class"); cls && cls->is_string())
        phi3_bpe = cls->as_string("tokenizer_class") == "GPT2Tokenizer";
  if (arch == Arch::phi3 && !phi3_bpe) {
    vocab = sentencepiece_vocab(dir, config, report.warnings, /*phi3=*/true);
  } else if (arch == Arch::gemma2 || arch == Arch::gemma3 ||
             (!bpe_only && !phi3_bpe && fs::is_regular_file(dir / "tokenizer.model"))) {
    vocab = sentencepiece_vocab(dir, config, report.warnings);
  } else {
    // Llama's converter tries SentencePiece, then LlamaHfVocab (a tokenizer.json made from a
    // SentencePiece model: BPE with byte fallback), then byte-level BPE; Qwen's skips the second.
    if (arch == Arch::llama || arch == Arch::granite)
      if (const auto tok = read_json_if(dir / "tokenizer.json")) {
        const json::Value* model = tok->find("model");
        const json::Value* fallback = model ? model->find("byte_fallback") : nullptr;
        const json::Value* ignore = model ? model->find("ignore_merges") : nullptr;
        const bool byte_fallback = fallback && fallback->is_bool() && fallback->as_bool("byte_fallback");
        const bool llama3 = ignore && ignore->is_bool() && ignore->as_bool("ignore_merges") && !byte_fallback;
        if (!llama3 && byte_fallback)
          fail(ErrorCode::unsupported,
               "convert: '{}' has a SentencePiece-style tokenizer.json without tokenizer.model; ember converts "
               "SentencePiece vocabularies from tokenizer.model only",
               dir.string());
      }
    vocab = bpe_vocab(dir, config, report.warnings);
  }
  // The BPE path's SpecialVocab is made without a vocabulary size: ids are not range-checked.
  const SpecialTokens special = special_tokens(
      dir, vocab.model == "gpt2" ? std::numeric_limits<int64_t>::max() : int64_t(vocab.tokens.size()), report.warnings);
  report.n_vocab = int64_t(vocab.tokens.size());

  gguf::Writer w;
  w.add_string("general.architecture", a);
  w.add_string("general.type", "model");
  w.add_string("general.name", dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string());
  const int64_t n_head_default = arch == Arch::gemma3 ? 8 : config.get_int("num_attention_heads");
  const int64_t n_head = config.find_int("num_attention_heads").value_or(n_head_default);
  const int64_t n_embd = config.get_int("hidden_size");
  const int64_t n_layer = config.get_int("num_hidden_layers");
  std::optional<int64_t> n_head_kv = config.find_int("num_key_value_heads");
  if (n_head < 1 || n_embd < 1 || n_layer < 1 || (n_head_kv && *n_head_kv < 1))
    fail(ErrorCode::malformed_file, "convert: {}: hidden_size {}, num_hidden_layers {} and the head counts must be positive",
         config.path(), n_embd, n_layer);
  double phi3_attn_factor = 0;
  if (arch == Arch::phi3) {   // Phi3MiniModel.set_gguf_parameters
    const double rot = config.find_double("partial_rotary_factor").value_or(1.0);
    const int64_t rope_dims = int64_t(rot * double(n_embd)) / n_head;
    w.add_uint32(a + ".context_length", to_u32(config.get_int("max_position_embeddings"), "context"));
    w.add_uint32(a + ".rope.scaling.original_context_length",
                 to_u32(config.get_int("original_max_position_embeddings"), "original_max_position_embeddings"));
    w.add_uint32(a + ".embedding_length", to_u32(n_embd, "hidden_size"));
    w.add_uint32(a + ".feed_forward_length", to_u32(config.get_int("intermediate_size"), "intermediate_size"));
    w.add_uint32(a + ".block_count", to_u32(n_layer, "num_hidden_layers"));
    w.add_uint32(a + ".attention.head_count", to_u32(n_head, "num_attention_heads"));
    w.add_uint32(a + ".attention.head_count_kv", to_u32(n_head_kv.value_or(n_head), "num_key_value_heads"));
    w.add_float32(a + ".attention.layer_norm_rms_epsilon", float(*config.find_double("rms_norm_eps")));
    w.add_uint32(a + ".rope.dimension_count", to_u32(rope_dims, "rope dimensions"));
    w.add_float32(a + ".rope.freq_base", float(*config.find_double("rope_theta")));
    w.add_uint32("general.file_type", file_type);
    w.add_uint32(a + ".attention.sliding_window", to_u32(config.find_int("sliding_window").value_or(0), "sliding_window"));
    // generate_extra_tensors: LongRoPE's attention factor here, its factor tensors below.
    if (const json::Value* scaling = config.find("rope_scaling")) {
      const double scale = double(config.get_int("max_position_embeddings")) /
                           double(config.get_int("original_max_position_embeddings"));
      const json::Value* type = scaling->find("rope_type");
      if (!type) type = scaling->find("type");
      std::string kind = type && type->is_string() ? type->as_string("rope_type") : "";
      for (char& ch : kind) ch = char(std::tolower(static_cast<unsigned char>(ch)));
      const double orig = double(config.get_int("original_max_position_embeddings"));
      if (kind == "su" || kind == "longrope") phi3_attn_factor = scale > 1.0 ? std::sqrt(1 + std::log(scale) / std::log(orig)) : 1.0;
      else if (kind == "yarn") phi3_attn_factor = scale > 1.0 ? 0.1 * std::log(scale) + 1.0 : 1.0;
      else fail(ErrorCode::unsupported, "convert: Phi-3 rope_scaling '{}' is not converted (longrope, su, yarn are)", kind);
      w.add_float32(a + ".rope.scaling.attn_factor", float(phi3_attn_factor));
    }
  } else if (arch == Arch::gemma2) {
    const int64_t head_dim = config.get_int("head_dim");
    w.add_uint32(a + ".context_length", to_u32(config.get_int("max_position_embeddings"), "context"));
    w.add_uint32(a + ".embedding_length", to_u32(n_embd, "hidden_size"));
    w.add_uint32(a + ".block_count", to_u32(n_layer, "num_hidden_layers"));
    w.add_uint32(a + ".feed_forward_length", to_u32(config.get_int("intermediate_size"), "intermediate_size"));
    w.add_uint32(a + ".attention.head_count", to_u32(n_head, "num_attention_heads"));
    w.add_uint32(a + ".attention.head_count_kv", to_u32(n_head_kv.value_or(n_head), "num_key_value_heads"));
    w.add_float32(a + ".attention.layer_norm_rms_epsilon", float(*config.find_double("rms_norm_eps")));
    w.add_uint32(a + ".attention.key_length", to_u32(head_dim, "head_dim"));
    w.add_uint32(a + ".attention.value_length", to_u32(head_dim, "head_dim"));
    w.add_uint32("general.file_type", file_type);
    for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
      const auto cap = config.find_double(key);
      if (!cap) fail(ErrorCode::unsupported, "convert: {} has no {}, which the Gemma 2 converter requires", config.path(), key);
      w.add_float32(a + "." + key, float(*cap));
    }
    w.add_uint32(a + ".attention.sliding_window", to_u32(config.get_int("sliding_window"), "sliding_window"));
  } else if (arch == Arch::gemma3) {
    const int64_t head_dim = config.find_int("head_dim").value_or(256);
    w.add_uint32(a + ".context_length", to_u32(config.find_int("max_position_embeddings").value_or(131072), "context"));
    w.add_uint32(a + ".embedding_length", to_u32(n_embd, "hidden_size"));
    w.add_uint32(a + ".block_count", to_u32(n_layer, "num_hidden_layers"));
    w.add_uint32(a + ".feed_forward_length", to_u32(config.get_int("intermediate_size"), "intermediate_size"));
    w.add_uint32(a + ".attention.head_count", to_u32(n_head, "num_attention_heads"));
    w.add_float32(a + ".attention.layer_norm_rms_epsilon", float(config.find_double("rms_norm_eps").value_or(1e-6)));
    w.add_uint32(a + ".attention.key_length", to_u32(head_dim, "head_dim"));
    w.add_uint32(a + ".attention.value_length", to_u32(head_dim, "head_dim"));
    w.add_uint32("general.file_type", file_type);
    w.add_float32(a + ".rope.freq_base", float(config.find_double("rope_theta").value_or(1000000.0)));
    if (config.find("attn_logit_softcapping") || config.find("final_logit_softcapping"))
      fail(ErrorCode::unsupported, "convert: {} sets logit soft-capping, which Gemma 3 does not have", config.path());
    w.add_uint32(a + ".attention.sliding_window", to_u32(config.get_int("sliding_window"), "sliding_window"));
    w.add_uint32(a + ".attention.head_count_kv", to_u32(n_head_kv.value_or(4), "num_key_value_heads"));
    if (const json::Value* scaling = config.find("rope_scaling")) {
      const json::Value* type = scaling->find("rope_type");
      if (!type || !type->is_string() || type->as_string("rope_type") != "linear")
        fail(ErrorCode::unsupported, "convert: Gemma 3 rope_scaling other than linear is not converted");
      const json::Value* factor = scaling->find("factor");
      if (!factor) fail(ErrorCode::malformed_file, "{}: rope_scaling without a factor", config.path());
      w.add_string(a + ".rope.scaling.type", "linear");
      w.add_float32(a + ".rope.scaling.factor", float(factor->as_double("rope_scaling.factor")));
    }
  } else {
    // TextModel.set_gguf_parameters (with the config class's defaults filled in).
    w.add_uint32(a + ".block_count", to_u32(n_layer, "num_hidden_layers"));
    if (const auto ctx = config.find_int("max_position_embeddings")) w.add_uint32(a + ".context_length", to_u32(*ctx, "context"));
    w.add_uint32(a + ".embedding_length", to_u32(n_embd, "hidden_size"));
    if (const auto ff = config.find_int("intermediate_size")) w.add_uint32(a + ".feed_forward_length", to_u32(*ff, "ff"));
    w.add_uint32(a + ".attention.head_count", to_u32(n_head, "num_attention_heads"));
    if (n_head_kv) w.add_uint32(a + ".attention.head_count_kv", to_u32(*n_head_kv, "num_key_value_heads"));
    if (const auto theta = config.find_double("rope_theta")) w.add_float32(a + ".rope.freq_base", float(*theta));
    if (const auto eps = config.find_double("rms_norm_eps")) w.add_float32(a + ".attention.layer_norm_rms_epsilon", float(*eps));
    for (const char* key : {"layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"})
      if (const auto eps = config.find_double(key)) {
        w.add_float32(a + ".attention.layer_norm_epsilon", float(*eps));
        break;
      }
    if (const auto n = config.find_int("num_local_experts")) w.add_uint32(a + ".expert_count", to_u32(*n, "experts"));
    if (const auto n = config.find_int("num_experts_per_tok")) w.add_uint32(a + ".expert_used_count", to_u32(*n, "experts"));
    // Granite's converter drops head_dim before this point.
    const bool has_head_dim = arch != Arch::granite && config.find("head_dim");
    const int64_t head_dim_value = has_head_dim ? config.get_int("head_dim") : n_embd / std::max<int64_t>(n_head, 1);
    if (has_head_dim) {
      w.add_uint32(a + ".attention.key_length", to_u32(head_dim_value, "head_dim"));
      w.add_uint32(a + ".attention.value_length", to_u32(head_dim_value, "head_dim"));
    }
    w.add_uint32("general.file_type", file_type);
    const json::Value* scaling = config.find("rope_scaling");
    const json::Value* type = scaling ? scaling->find("rope_type") : nullptr;
    if (scaling && !type) type = scaling->find("type");
    const std::string kind = type && type->is_string() ? type->as_string("rope_type") : "";
    if (arch == Arch::llama || arch == Arch::granite) {   // LlamaModel's additions
      w.add_uint32(a + ".vocab_size", to_u32(config.get_int("vocab_size"), "vocab_size"));
      const int64_t rope_dim = head_dim_value;
      w.add_uint32(a + ".rope.dimension_count", to_u32(rope_dim, "head_dim"));
      if (kind == "linear" && scaling->find("factor")) {
        w.add_string(a + ".rope.scaling.type", "linear");
        w.add_float32(a + ".rope.scaling.factor", float(scaling->find("factor")->as_double("factor")));
      } else if (kind != "llama3" && !kind.empty() && kind != "default") {
        fail(ErrorCode::unsupported, "convert: Llama rope_scaling '{}' is not converted (linear and llama3 are)", kind);
      }
      if (arch == Arch::granite)   // GraniteModel's: the multipliers, each when nonzero
        for (const auto& [key, gguf_key] : {std::pair{"attention_multiplier", ".attention.scale"},
                                            std::pair{"embedding_multiplier", ".embedding_scale"},
                                            std::pair{"residual_multiplier", ".residual_scale"},
                                            std::pair{"logits_scaling", ".logit_scale"}})
          if (const auto v = config.find_double(key); v && *v != 0.0) w.add_float32(a + gguf_key, float(*v));
    } else if (arch == Arch::olmo2) {   // TextModel only
    } else {   // Qwen2Model's and Qwen2MoeModel's: experts, YaRN scaling
      if (arch == Arch::qwen3moe) {
        if (const auto n = config.find_int("num_experts")) w.add_uint32(a + ".expert_count", to_u32(*n, "experts"));
        if (const auto n = config.find_int("moe_intermediate_size"))
          w.add_uint32(a + ".expert_feed_forward_length", to_u32(*n, "moe_intermediate_size"));
        if (const auto n = config.find_int("shared_expert_intermediate_size"))
          w.add_uint32(a + ".expert_shared_feed_forward_length", to_u32(*n, "shared_expert_intermediate_size"));
      }
      if (kind == "yarn" && scaling->find("factor")) {
        const json::Value* orig = scaling->find("original_max_position_embeddings");
        if (!orig) fail(ErrorCode::malformed_file, "{}: YaRN rope_scaling without original_max_position_embeddings", config.path());
        w.add_string(a + ".rope.scaling.type", "yarn");
        w.add_float32(a + ".rope.scaling.factor", float(scaling->find("factor")->as_double("factor")));
        w.add_uint32(a + ".rope.scaling.original_context_length", to_u32(orig->as_int("original_max_position_embeddings"), "ctx"));
      } else if (!kind.empty() && kind != "default") {
        fail(ErrorCode::unsupported, "convert: Qwen rope_scaling '{}' is not converted (yarn is)", kind);
      }
    }
  }
  w.add_uint32("general.quantization_version", 2);
  add_tokenizer(w, vocab, special);
  if (arch == Arch::gemma2 || arch == Arch::gemma3) w.add_bool("tokenizer.ggml.add_space_prefix", false);
  if (arch == Arch::llama || arch == Arch::granite) {
    if (const auto cfg = read_json_if(dir / "tokenizer_config.json"))
      if (const json::Value* p = cfg->find("add_prefix_space"); p && p->is_bool())
        w.add_bool("tokenizer.ggml.add_space_prefix", p->as_bool("add_prefix_space"));
    // The converter's rule for Granite's small models (a 49152-token vocabulary): no BOS.
    // (It would stop with a duplicate key when tokenizer_config.json also sets add_bos_token.)
    if (config.get_int("vocab_size") == 49152 && std::none_of(special.add.begin(), special.add.end(),
                                                              [](const auto& x) { return x.first == "bos"; }))
      w.add_bool("tokenizer.ggml.add_bos_token", false);
  }

  // Tensors: Llama 3's rope factors first, as the converter's generate_extra_tensors.
  std::vector<float> rope_factors;
  if (arch == Arch::llama || arch == Arch::granite) {
    const json::Value* scaling = config.find("rope_scaling");
    const json::Value* type = scaling ? scaling->find("rope_type") : nullptr;
    if (type && type->is_string() && type->as_string("rope_type") == "llama3")
      rope_factors = llama3_rope_factors(config, *scaling);
  }
  std::vector<float> phi3_long, phi3_short;
  if (arch == Arch::phi3)
    if (const json::Value* scaling = config.find("rope_scaling")) {
      const double rot = config.find_double("partial_rotary_factor").value_or(1.0);
      const size_t half = size_t(int64_t(rot * double(n_embd)) / n_head) / 2;
      const json::Value* lf = scaling->find("long_factor");
      const json::Value* sf = scaling->find("short_factor");
      if (!lf || !sf) fail(ErrorCode::malformed_file, "{}: rope_scaling needs long_factor and short_factor", config.path());
      for (const json::Value& x : lf->as_array("long_factor")) phi3_long.push_back(float(x.as_double("long_factor")));
      for (const json::Value& x : sf->as_array("short_factor")) phi3_short.push_back(float(x.as_double("short_factor")));
      if (phi3_long.size() != half || phi3_short.size() != half)
        fail(ErrorCode::malformed_file, "{}: rope long and short factors must have {} entries each (have {} and {})",
             config.path(), half, phi3_long.size(), phi3_short.size());
    }
  const int64_t total = int64_t(items.size()) + (rope_factors.empty() ? 0 : 1) + (phi3_long.empty() ? 0 : 2);
  int64_t done = 0;
  auto progress = [&](std::string_view name) {
    ++done;
    ++report.tensors;
    if (options.progress) options.progress(ConvertProgress{.tensor = done, .tensors = total, .name = name});
  };
  if (!rope_factors.empty()) {
    w.add_tensor("rope_freqs.weight", DType::f32, {int64_t(rope_factors.size())}, encode(rope_factors, DType::f32));
    progress("rope_freqs.weight");
  }
  if (!phi3_long.empty()) {
    w.add_tensor("rope_factors_long.weight", DType::f32, {int64_t(phi3_long.size())}, encode(phi3_long, DType::f32));
    progress("rope_factors_long.weight");
    w.add_tensor("rope_factors_short.weight", DType::f32, {int64_t(phi3_short.size())}, encode(phi3_short, DType::f32));
    progress("rope_factors_short.weight");
  }
  // The tensors' bytes are made while the file is written, one tensor at a time (the
  // Writer's fill functions), so that only one tensor is in memory; everything that can
  // fail is checked here first.
  const int64_t n_vocab_out = int64_t(vocab.tokens.size());
  for (const Item& item : items) {
    const convert::StTensor& t = *item.t;
    if (t.shape.empty() || t.shape.size() > 4)
      fail(ErrorCode::unsupported, "convert: tensor '{}' has {} dimensions", t.name, t.shape.size());
    for (const convert::StTensor* part : item.experts.empty() ? std::vector<const convert::StTensor*>{&t} : item.experts)
      if (part->dtype != convert::StDType::f32 && part->dtype != convert::StDType::f16 &&
          part->dtype != convert::StDType::bf16 && part->dtype != convert::StDType::f64)
        fail(ErrorCode::unsupported, "convert: tensor '{}' is {}; ember converts F32, F16, BF16 and F64 tensors",
             part->name, part->dtype_name);
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < t.shape.size(); ++d) rows *= t.shape[d];
    const int64_t cols = t.shape.back();
    std::vector<int64_t> shape(t.shape.rbegin(), t.shape.rend());   // GGUF: innermost first
    if (!item.experts.empty()) {   // a stack: [experts, rows, cols]
      if (t.shape.size() != 2) fail(ErrorCode::malformed_file, "convert: expert tensor '{}' is not a matrix", t.name);
      shape.push_back(int64_t(item.experts.size()));
    }
    const std::string& name = item.name;
    const bool permute_q = (arch == Arch::llama || arch == Arch::granite) &&
                           (ends_with(name, "attn_q.weight") || ends_with(name, "attn_q.bias"));
    const bool permute_k = (arch == Arch::llama || arch == Arch::granite) &&
                           (ends_with(name, "attn_k.weight") || ends_with(name, "attn_k.bias"));
    const int64_t permute_rows = t.shape.size() == 1 ? cols : rows, permute_cols = t.shape.size() == 1 ? 1 : cols;
    const int64_t q_heads = n_head, k_heads = n_head_kv.value_or(n_head);
    if ((permute_q && (q_heads <= 0 || permute_rows % (2 * q_heads) != 0)) ||
        (permute_k && (k_heads <= 0 || permute_rows % (2 * k_heads) != 0)))
      fail(ErrorCode::malformed_file, "convert: tensor '{}' has {} rows, not a multiple of 2 x its heads", t.name,
           permute_rows);
    const bool cut_embedding = arch == Arch::gemma3 && name == "token_embd.weight";
    if (cut_embedding) {
      if (t.shape.size() != 2 || rows < n_vocab_out)
        fail(ErrorCode::malformed_file, "convert: '{}' has {} rows for a vocabulary of {}", t.name, rows, n_vocab_out);
      shape[1] = n_vocab_out;
    }
    // Gemma's RMSNorm scales by (1 + w).
    const bool plus_one = (arch == Arch::gemma2 || arch == Arch::gemma3) && ends_with(t.name, "norm.weight");
    // 1-D tensors, norms, biases and the expert router are F32 whatever the type.
    const bool f32 = shape.size() <= 1 || ends_with(name, "_norm.weight") || !ends_with(name, ".weight") ||
                     ends_with(name, "ffn_gate_inp.weight");
    const DType type = f32 ? DType::f32 : matrix_type;
    w.add_deferred_tensor(name, type, shape, [&, item_ptr = &item, type, permute_q, permute_k, permute_rows, permute_cols,
                                     q_heads, k_heads, cut_embedding, plus_one, cols](std::span<std::byte> out) {
      const Item& it = *item_ptr;
      std::vector<float> values;
      if (it.experts.empty()) {
        values = to_f32(*it.t);
      } else {
        for (const convert::StTensor* e : it.experts) {
          const std::vector<float> part = to_f32(*e);
          values.insert(values.end(), part.begin(), part.end());
        }
      }
      if (permute_q) values = permute_heads(values, permute_rows, permute_cols, q_heads, it.t->name);
      if (permute_k) values = permute_heads(values, permute_rows, permute_cols, k_heads, it.t->name);
      if (cut_embedding) values.resize(size_t(n_vocab_out * cols));
      if (plus_one)
        for (float& x : values) x += 1.0f;
      encode_into(values, type, out);
      progress(it.name);
    });
  }

  w.write(temp.path());
  report.file_bytes = fs::file_size(temp.path());
  temp.commit();
  return report;
}

}  // namespace ember
