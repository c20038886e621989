// Helpers shared by the tokenizer tests: conformance vector files, vocabulary
// files built in memory, and small hand-made vocabularies.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace ember::test {

struct VectorCase {
  std::string text;
  std::vector<int32_t> ids;
};

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Texts separated (and terminated) by "\n__ggml_vocab_test__\n", and one line
// of space-separated ids per text.
inline std::vector<VectorCase> read_vectors(const std::filesystem::path& inp, const std::filesystem::path& out) {
  static constexpr std::string_view kSeparator = "\n__ggml_vocab_test__\n";
  const std::string texts = read_bytes(inp);
  std::vector<std::string> pieces;
  size_t pos = 0;
  while (true) {
    const size_t next = texts.find(kSeparator, pos);
    if (next == std::string::npos) {
      if (pos < texts.size()) pieces.push_back(texts.substr(pos));
      break;
    }
    pieces.push_back(texts.substr(pos, next - pos));
    pos = next + kSeparator.size();
  }
  std::vector<VectorCase> cases;
  std::istringstream lines(read_bytes(out));
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    if (i >= pieces.size()) throw std::runtime_error("more id lines than texts in " + out.string());
    VectorCase c{pieces[i++], {}};
    std::istringstream ids(line);
    int64_t id = 0;
    while (ids >> id) c.ids.push_back(static_cast<int32_t>(id));
    cases.push_back(std::move(c));
  }
  if (i != pieces.size()) throw std::runtime_error("fewer id lines than texts in " + out.string());
  return cases;
}

// A copy of `source`'s metadata with tokenizer.ggml.pre replaced (how the
// Llama-3 and Qwen2 vectors' vocabularies were made from the GPT-2 one).
inline gguf::File with_pre_tokenizer(const gguf::File& source, const std::string& pre) {
  gguf::Writer writer;
  bool replaced = false;
  for (const gguf::KeyValue& kv : source.metadata()) {
    if (kv.key == "tokenizer.ggml.pre") {
      writer.add_string(kv.key, pre);
      replaced = true;
    } else {
      writer.add(kv.key, kv.value);
    }
  }
  if (!replaced) writer.add_string("tokenizer.ggml.pre", pre);
  return gguf::File::from_bytes(writer.to_bytes(), source.name() + " with pre=" + pre);
}

// Strict UTF-8 check: no overlong forms, surrogates or values past U+10FFFF.
inline bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<uint8_t>(s[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t n_continuation = 0;
    uint32_t cp = 0;
    uint32_t smallest = 0;
    if ((lead & 0xE0) == 0xC0) {
      n_continuation = 1, cp = lead & 0x1F, smallest = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      n_continuation = 2, cp = lead & 0x0F, smallest = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      n_continuation = 3, cp = lead & 0x07, smallest = 0x10000;
    } else {
      return false;
    }
    if (i + n_continuation >= s.size()) return false;
    for (size_t k = 1; k <= n_continuation; ++k) {
      const auto b = static_cast<uint8_t>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < smallest || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n_continuation + 1;
  }
  return true;
}

// Lists the ids for messages: "[1, 2, 3]".
inline std::string format_ids(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

// A hand-made vocabulary: tokens with their scores and types, plus any extra
// metadata the test adds to the writer before build().
struct VocabBuilder {
  std::string model = "llama";
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  gguf::Writer extra;   // more keys, written after the token arrays

  int32_t add(std::string text, float score = 0.0f, tok::TokenType type = tok::TokenType::normal) {
    tokens.push_back(std::move(text));
    scores.push_back(score);
    types.push_back(static_cast<int32_t>(type));
    return static_cast<int32_t>(tokens.size() - 1);
  }
  // <0x00>..<0xFF> byte tokens.
  void add_byte_tokens() {
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) add(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">", 0.0f, tok::TokenType::byte);
  }
  gguf::File build(bool with_scores = true, bool with_types = true) const {
    gguf::Writer writer;
    writer.add_string("general.architecture", "llama");
    writer.add_string("tokenizer.ggml.model", model);
    writer.add_string_array("tokenizer.ggml.tokens", tokens);
    if (with_scores) writer.add_float32_array("tokenizer.ggml.scores", scores);
    if (with_types) writer.add_int32_array("tokenizer.ggml.token_type", types);
    std::vector<std::byte> bytes = writer.to_bytes();
    // Merge the extra keys: rebuild with them appended.
    const gguf::File base = gguf::File::from_bytes(std::move(bytes));
    const gguf::File more = gguf::File::from_bytes(extra.to_bytes());
    gguf::Writer all;
    for (const gguf::KeyValue& kv : base.metadata()) all.add(kv.key, kv.value);
    for (const gguf::KeyValue& kv : more.metadata()) all.add(kv.key, kv.value);
    return gguf::File::from_bytes(all.to_bytes(), "test-vocab");
  }
};

}  // namespace ember::test
