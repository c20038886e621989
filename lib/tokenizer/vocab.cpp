#include "tokenizer/vocab.hpp"

#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>
#include <string>

#include "common/fail.hpp"
#include "gguf/gguf.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/unicode.hpp"

namespace ember::tok {

namespace {

constexpr std::string_view kModelKey = "tokenizer.ggml.model";
constexpr std::string_view kPreKey = "tokenizer.ggml.pre";
constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";
constexpr std::string_view kMergesKey = "tokenizer.ggml.merges";

// Texts of tokens that end a turn, in the order they are preferred as "the" EOT.
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "_<EOT>",
};
constexpr std::string_view kEndOfMessageText = "<|eom_id|>";

// At most this many bytes of a bad merge are quoted in an error message.
constexpr size_t kQuoteLimit = 64;

const gguf::Array& string_array(const gguf::File& file, std::string_view key) {
  const gguf::Array& array = file.get_array(key);
  if (array.element_type != gguf::ValueType::string) {
    fail(ErrorCode::malformed_file, "{}: metadata key '{}' must be an array of strings, not of {}", file.name(), key,
         gguf::value_type_name(array.element_type));
  }
  return array;
}

void load_tokens(const gguf::File& file, Vocab& v) {
  const gguf::Array& tokens = string_array(file, kTokensKey);
  if (tokens.items.empty()) fail(ErrorCode::malformed_file, "{}: metadata key '{}' is empty", file.name(), kTokensKey);
  if (tokens.items.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    fail(ErrorCode::malformed_file, "{}: metadata key '{}' has {} tokens, more than ids can count", file.name(),
         kTokensKey, tokens.items.size());
  }
  const size_t n = tokens.items.size();
  size_t total = 0;
  for (const gguf::Value& t : tokens.items) total += t.as_string(kTokensKey).size();
  if (total > std::numeric_limits<uint32_t>::max()) {
    fail(ErrorCode::malformed_file, "{}: metadata key '{}' holds {} bytes of text, more than 4 GiB", file.name(),
         kTokensKey, total);
  }
  v.text_blob.reserve(total);
  v.offsets.reserve(n + 1);
  v.offsets.push_back(0);
  for (const gguf::Value& t : tokens.items) {
    v.text_blob.append(t.as_string(kTokensKey));
    v.offsets.push_back(static_cast<uint32_t>(v.text_blob.size()));
  }
  v.scores.assign(n, 0.0f);
  v.types.assign(n, TokenType::normal);

  // The blob no longer grows, so views into it stay valid.
  v.by_text.reserve(n);
  for (int32_t id = 0; id < static_cast<int32_t>(n); ++id) {
    const std::string_view text = v.text(id);
    if (text.empty()) continue;   // can never be matched; decodes to nothing
    const auto [it, inserted] = v.by_text.emplace(text, id);
    if (!inserted) {
      fail(ErrorCode::malformed_file, "{}: metadata key '{}': tokens {} and {} are both '{}'", file.name(), kTokensKey,
           it->second, id, text.substr(0, kQuoteLimit));
    }
  }
}

void load_scores_and_types(const gguf::File& file, Vocab& v) {
  const size_t n = v.types.size();
  if (const gguf::Value* value = file.find(kScoresKey)) {
    const gguf::Array& scores = value->as_array(kScoresKey);
    if (scores.items.size() != n) {
      fail(ErrorCode::malformed_file, "{}: metadata key '{}' has {} entries but there are {} tokens", file.name(),
           kScoresKey, scores.items.size(), n);
    }
    for (size_t i = 0; i < n; ++i) v.scores[i] = static_cast<float>(scores.items[i].as_float(kScoresKey));
  }
  if (const gguf::Value* value = file.find(kTypesKey)) {
    const gguf::Array& types = value->as_array(kTypesKey);
    if (types.items.size() != n) {
      fail(ErrorCode::malformed_file, "{}: metadata key '{}' has {} entries but there are {} tokens", file.name(),
           kTypesKey, types.items.size(), n);
    }
    for (size_t i = 0; i < n; ++i) {
      const int64_t type = types.items[i].as_int(kTypesKey);
      if (type < 0 || type > static_cast<int64_t>(TokenType::byte)) {
        fail(ErrorCode::malformed_file, "{}: metadata key '{}': token {} has type {}, not one of 0..6", file.name(),
             kTypesKey, i, type);
      }
      v.types[i] = static_cast<TokenType>(type);
    }
  }
  // A byte token must be spelled <0xNN>: its text is what it decodes to.
  for (int32_t id = 0; id < v.n_tokens(); ++id) {
    if (v.types[id] != TokenType::byte) continue;
    const std::string_view text = v.text(id);
    const bool ok = text.size() == 6 && text.substr(0, 3) == "<0x" && text[5] == '>' &&
                    std::isxdigit(static_cast<unsigned char>(text[3])) &&
                    std::isxdigit(static_cast<unsigned char>(text[4]));
    if (!ok) {
      fail(ErrorCode::malformed_file, "{}: metadata key '{}': token {} has the byte type but its text '{}' is not <0xNN>",
           file.name(), kTypesKey, id, text.substr(0, kQuoteLimit));
    }
  }
}

// Reads an optional token id; throws malformed_file when it is out of range.
void read_token_id(const gguf::File& file, const Vocab& v, std::string_view key, int32_t& id) {
  const gguf::Value* value = file.find(key);
  if (!value) return;
  const uint64_t raw = value->as_uint(key);
  if (raw >= static_cast<uint64_t>(v.n_tokens())) {
    fail(ErrorCode::malformed_file, "{}: metadata key '{}' is {} but the vocabulary has {} tokens", file.name(), key,
         raw, v.n_tokens());
  }
  id = static_cast<int32_t>(raw);
}

void load_merges(const gguf::File& file, Vocab& v) {
  const gguf::Array& merges = string_array(file, kMergesKey);
  if (merges.items.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    fail(ErrorCode::malformed_file, "{}: metadata key '{}' has too many entries", file.name(), kMergesKey);
  }
  v.merges.reserve(merges.items.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.items.size(); ++rank) {
    const std::string_view merge = merges.items[rank].as_string(kMergesKey);
    // "left right"; the left part is never empty, so look for the space after it.
    const size_t space = merge.size() > 1 ? merge.find(' ', 1) : std::string_view::npos;
    if (space == std::string_view::npos) {
      fail(ErrorCode::malformed_file, "{}: metadata key '{}': merge {} '{}' is not two tokens separated by a space",
           file.name(), kMergesKey, rank, merge.substr(0, kQuoteLimit));
    }
    const std::string_view left = merge.substr(0, space);
    const std::string_view right = merge.substr(space + 1);
    joined.assign(left).append(right);
    const int32_t left_id = v.find(left);
    const int32_t right_id = v.find(right);
    const int32_t result_id = v.find(joined);
    if (left_id == kNoToken || right_id == kNoToken || result_id == kNoToken) {
      const std::string_view missing = left_id == kNoToken ? left : right_id == kNoToken ? right : joined;
      fail(ErrorCode::malformed_file, "{}: metadata key '{}': merge {} '{}' refers to '{}', which is not a token",
           file.name(), kMergesKey, rank, merge.substr(0, kQuoteLimit), missing.substr(0, kQuoteLimit));
    }
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(left_id)) << 32) | static_cast<uint32_t>(right_id);
    v.merges.emplace(key, Merge{static_cast<int32_t>(rank), result_id});   // the first (lowest) rank wins
  }
}

void find_byte_tokens(Vocab& v) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    if (v.model == TokenizerModel::spm) {
      const char spelled[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      const char single = static_cast<char>(b);
      int32_t id = v.find(std::string_view(spelled, 6));
      if (id == kNoToken) id = v.find(std::string_view(&single, 1));
      if (id == kNoToken) id = v.unk;
      v.byte_fallback[b] = id;
      v.byte_piece[b] = kNoToken;
    } else {
      std::string mapped;
      unicode::append_utf8(mapped, byte_map::char_of_byte(static_cast<uint8_t>(b)));
      v.byte_piece[b] = v.find(mapped);
      v.byte_fallback[b] = kNoToken;
    }
  }
}

// EOT, EOM and the end-of-generation set. Tokens with a well-known
// end-of-turn text count as control tokens whatever their stored type, as in
// llama.cpp (so they are not matched in text unless parse_special is on).
void find_end_of_generation(Vocab& v) {
  for (const std::string_view text : kEndOfTurnTexts) {
    const int32_t id = v.find(text);
    if (id == kNoToken) continue;
    if (v.eot == kNoToken) v.eot = id;
    v.types[id] = TokenType::control;
    v.eog_ids.push_back(id);
  }
  if (const int32_t id = v.find(kEndOfMessageText); id != kNoToken) {
    if (v.eom == kNoToken) v.eom = id;
    v.types[id] = TokenType::control;
    v.eog_ids.push_back(id);
  }
  for (const int32_t id : {v.eos, v.eot, v.eom}) {
    if (id != kNoToken) v.eog_ids.push_back(id);
  }
  std::sort(v.eog_ids.begin(), v.eog_ids.end());
  v.eog_ids.erase(std::unique(v.eog_ids.begin(), v.eog_ids.end()), v.eog_ids.end());
}

}  // namespace

Vocab load_vocab(const gguf::File& file, const LogCallback& log) {
  Vocab v;
  const std::optional<std::string_view> model = file.find_string(kModelKey);
  if (!model) fail(ErrorCode::malformed_file, "{}: missing required metadata key '{}'", file.name(), kModelKey);
  bool add_bos_default = false;
  if (*model == "llama") {
    v.model = TokenizerModel::spm;
    v.add_space_prefix = true;
    add_bos_default = true;
  } else if (*model == "gpt2") {
    v.model = TokenizerModel::bpe;
    const std::optional<std::string_view> pre = file.find_string(kPreKey);
    std::optional<PreTokenizerSpec> spec;
    if (!pre) {
      // As llama.cpp: the default rule, which is rarely the one the model was trained with.
      spec = default_pre_tokenizer_spec();
      if (log) {
        try {
          log(LogLevel::warning,
              fmt::format("{}: byte-level BPE tokenizer without '{}': using the default pre-tokenizer rule; "
                          "the ids may differ from the model's own tokenizer (convert the model again)",
                          file.name(), kPreKey));
        } catch (...) {
          // A throwing log callback must not fail the load.
        }
      }
    } else {
      spec = pre_tokenizer_spec(*pre);
    }
    if (!spec) {
      fail(ErrorCode::unsupported, "{}: pre-tokenizer '{}' ({}) is not supported", file.name(), *pre, kPreKey);
    }
    v.pre = spec->rule;
    v.ignore_merges = spec->ignore_merges;
    add_bos_default = spec->add_bos;
  } else {
    fail(ErrorCode::unsupported,
         "{}: tokenizer model '{}' ({}) is not supported; ember implements 'llama' (SentencePiece) and 'gpt2' "
         "(byte-level BPE)",
         file.name(), *model, kModelKey);
  }

  load_tokens(file, v);
  load_scores_and_types(file, v);

  if (v.model == TokenizerModel::spm) {
    // SentencePiece conventions when the file does not say otherwise.
    const auto if_valid = [&](int32_t id) { return id < v.n_tokens() ? id : kNoToken; };
    v.unk = if_valid(0);
    v.bos = if_valid(1);
    v.eos = if_valid(2);
  }
  read_token_id(file, v, "tokenizer.ggml.bos_token_id", v.bos);
  read_token_id(file, v, "tokenizer.ggml.eos_token_id", v.eos);
  read_token_id(file, v, "tokenizer.ggml.unknown_token_id", v.unk);
  read_token_id(file, v, "tokenizer.ggml.padding_token_id", v.pad);
  read_token_id(file, v, "tokenizer.ggml.eot_token_id", v.eot);
  read_token_id(file, v, "tokenizer.ggml.eom_token_id", v.eom);

  const gguf::Value* add_bos = file.find("tokenizer.ggml.add_bos_token");
  v.add_bos = add_bos ? add_bos->as_bool("tokenizer.ggml.add_bos_token") : add_bos_default;
  if (v.add_bos && v.bos == kNoToken) {
    if (add_bos) {
      fail(ErrorCode::malformed_file, "{}: 'tokenizer.ggml.add_bos_token' is true but there is no BOS token",
           file.name());
    }
    v.add_bos = false;
  }
  v.add_eos = file.get_bool_or("tokenizer.ggml.add_eos_token", false);
  if (v.add_eos && v.eos == kNoToken) {
    fail(ErrorCode::malformed_file, "{}: 'tokenizer.ggml.add_eos_token' is true but there is no EOS token", file.name());
  }
  v.add_space_prefix = file.get_bool_or("tokenizer.ggml.add_space_prefix", v.add_space_prefix);

  find_byte_tokens(v);
  if (v.model == TokenizerModel::bpe) load_merges(file, v);
  find_end_of_generation(v);
  return v;
}

}  // namespace ember::tok
