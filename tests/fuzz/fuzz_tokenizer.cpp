// libFuzzer target: arbitrary bytes through the SentencePiece and byte-level
// BPE tokenizers (every pre-tokenizer rule, on the GPT-2 vocabulary). Encoding must never crash,
// every id must be valid, the streaming decoder must agree with the token
// pieces, and byte-level BPE must give valid UTF-8 text back unchanged.
//
// Input: byte 0 picks the vocabulary (bits 0-3 and 6-7) and the flags (bits
// 4-5), the rest is the text.
// The vocabularies are read from $EMBER_SHARED_DIR/tokenizer (default: the
// shared folder the build was configured with).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ember/error.hpp"
#include "gguf/gguf.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode.hpp"

namespace {

std::filesystem::path vocab_dir() {
  if (const char* env = std::getenv("EMBER_SHARED_DIR")) return std::filesystem::path(env) / "tokenizer";
  return std::filesystem::path(EMBER_SHARED_DIR) / "tokenizer";
}

ember::tok::Tokenizer with_pre(const ember::gguf::File& gpt2, const std::string& pre) {
  ember::gguf::Writer writer;
  for (const auto& kv : gpt2.metadata()) {
    if (kv.key == "tokenizer.ggml.pre") {
      writer.add_string(kv.key, pre);
    } else {
      writer.add(kv.key, kv.value);
    }
  }
  return ember::tok::Tokenizer::from_gguf(ember::gguf::File::from_bytes(writer.to_bytes()));
}

struct Vocabularies {
  std::vector<ember::tok::Tokenizer> all;
  Vocabularies() {
    const auto spm = ember::gguf::File::open(vocab_dir() / "ggml-vocab-llama-spm.gguf");
    const auto gpt2 = ember::gguf::File::open(vocab_dir() / "ggml-vocab-gpt-2.gguf");
    all.push_back(ember::tok::Tokenizer::from_gguf(spm));
    all.push_back(ember::tok::Tokenizer::from_gguf(gpt2));
    // One name of every other rule.
    std::set<ember::tok::PreTokenizer> rules = {ember::tok::PreTokenizer::gpt2};
    for (const std::string_view name : ember::tok::supported_pre_tokenizers()) {
      const auto tok = with_pre(gpt2, std::string(name));
      if (rules.insert(tok.pre_tokenizer()).second) all.push_back(tok);
    }
  }
};

[[noreturn]] void violated() { __builtin_trap(); }

// Strictly valid UTF-8 (no overlongs, surrogates or values past U+10FFFF).
bool valid_utf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const auto d = ember::tok::unicode::decode(s, pos);
    if (d.cp == ember::tok::unicode::kReplacementChar && s.compare(pos, 3, "\xEF\xBF\xBD") != 0) return false;
    const auto lead = static_cast<uint8_t>(s[pos]);
    if ((d.size == 2 && d.cp < 0x80) || (d.size == 3 && (d.cp < 0x800 || (d.cp >= 0xD800 && d.cp <= 0xDFFF))) ||
        (d.size == 4 && d.cp < 0x10000) || lead == 0xC0 || lead == 0xC1) {
      return false;
    }
    pos += d.size;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Vocabularies vocabularies;
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  const size_t index = (selector & 0x0F) | ((selector & 0xC0) >> 2);
  const auto& tok = vocabularies.all[index % vocabularies.all.size()];
  const bool parse_special = (selector & 0x10) != 0;
  const bool add_bos = (selector & 0x20) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text, add_bos, parse_special);
  } catch (const ember::Error&) {
    return 0;   // a typed error is an acceptable outcome; a crash is not
  }
  for (const int32_t id : ids) {
    if (id < 0 || id >= tok.n_vocab()) violated();
  }
  const std::string decoded = tok.decode(ids, true);

  ember::tok::StreamDecoder stream(tok, true);
  std::string streamed;
  for (const int32_t id : ids) streamed += stream.push(id);
  streamed += stream.flush();
  std::string pieces;
  for (const int32_t id : ids) pieces += tok.token_piece(id, true);
  if (streamed != pieces) violated();

  // Without an added BOS, byte-level BPE gives valid text back byte for byte
  // (special tokens matched in the text render as their text).
  if (!add_bos && tok.model() == ember::tok::TokenizerModel::bpe && valid_utf8(text) && decoded != text) violated();
  return 0;
}

#if !defined(EMBER_FUZZ_NO_MAIN) && !defined(EMBER_FUZZ_LIBFUZZER)
#error "build with -fsanitize=fuzzer (EMBER_FUZZ_LIBFUZZER) or link a driver (EMBER_FUZZ_NO_MAIN)"
#endif
