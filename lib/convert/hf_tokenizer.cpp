// The checkpoint's tokenizer (hf_tokenizer.hpp).
#include "convert/hf_tokenizer.hpp"

#include <cstdlib>
#include <limits>
#include <map>
#include <string_view>

#include "common/fail.hpp"
#include "common/json.hpp"
#include "convert/spm_model.hpp"

namespace ember::convert {

namespace fs = std::filesystem;

namespace {

constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;

// Vocabularies are built in memory with one string per id: a size beyond any real model
// (the largest today are about 262,000) is a broken config, not an allocation to try.
void check_vocab_size(int64_t n_vocab, const Config& config) {
  constexpr int64_t kMaxVocab = int64_t(1) << 24;
  if (n_vocab < 1 || n_vocab > kMaxVocab)
    fail(ErrorCode::malformed_file, "{}: vocab_size {} is outside 1 .. {}", config.path(), n_vocab, kMaxVocab);
}

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
  check_vocab_size(n_vocab, config);
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
  check_vocab_size(n_vocab, config);
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



}  // namespace

// The vocabulary an architecture's converter class reads (see hf_tokenizer.hpp).
Vocab read_vocabulary(const fs::path& dir, const Config& config, Arch arch, std::vector<std::string>& warnings) {
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
    vocab = sentencepiece_vocab(dir, config, warnings, /*phi3=*/true);
  } else if (arch == Arch::gemma2 || arch == Arch::gemma3 ||
             (!bpe_only && !phi3_bpe && fs::is_regular_file(dir / "tokenizer.model"))) {
    vocab = sentencepiece_vocab(dir, config, warnings);
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
    vocab = bpe_vocab(dir, config, warnings);
  }
  return vocab;
}

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

}  // namespace ember::convert
