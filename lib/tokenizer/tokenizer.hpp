// Tokenizers read from GGUF metadata: SentencePiece-style ("llama" model) and
// byte-level BPE ("gpt2" model, with every pre-tokenizer rule llama.cpp knows).
// Encoding gives the ids llama.cpp gives for the same file and text.
//
// A Tokenizer is immutable once built; copies share the same vocabulary, and
// every const member may be called from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ember/log.hpp"

namespace ember::gguf {
class File;
}

namespace ember::tok {

// "No such token" (a missing BOS, EOT, ...).
inline constexpr int32_t kNoToken = -1;

// Token types as numbered in GGUF `tokenizer.ggml.token_type`.
enum class TokenType : uint8_t {
  undefined = 0,
  normal = 1,        // ordinary text piece
  unknown = 2,       // <unk>
  control = 3,       // <bos>, <end_of_turn>, ...: only matched in text when parse_special is on
  user_defined = 4,  // added tokens: always matched in text, before the model's own pieces
  unused = 5,
  byte = 6,          // <0xNN> byte-fallback pieces of SentencePiece vocabularies
};

enum class TokenizerModel : uint8_t {
  spm,   // "llama": SentencePiece-style, merges by piece score, byte fallback
  bpe,   // "gpt2": byte-level BPE, merges by rank
};

// Pre-tokenizer rule of a byte-level BPE vocabulary: how the text is split
// into words before merging. Many tokenizer.ggml.pre names share one rule; the
// table of names and the split patterns of each rule are in pre_tokenizer.cpp
// (see docs/tokenizer.md).
enum class PreTokenizer : uint8_t {
  none,             // SentencePiece vocabularies have none
  gpt2,             // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  llama3,           // Llama-3: case-insensitive contractions, numbers in groups of up to 3, newline runs
  qwen2,            // as llama3 but every digit alone
  default_bpe,      // a BPE vocabulary without tokenizer.ggml.pre, or "default"
  deepseek_llm,
  deepseek_coder,
  deepseek_v3,
  falcon,
  starcoder,        // every digit alone, then the gpt2 rule
  bloom,
  viking,
  tekken,
  chameleon,
  gpt4o,
  superbpe,
  bailingmoe,
  seed_coder,
};

// Short name of a rule ("gpt2", "deepseek_llm", ...); a static string.
std::string_view pre_tokenizer_rule_name(PreTokenizer rule);

// Every tokenizer.ggml.pre value ember accepts for a byte-level BPE
// vocabulary, in the order of its table (the names llama.cpp's loader accepts).
std::vector<std::string_view> supported_pre_tokenizers();

class StreamDecoder;

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from `file`. Throws ember::Error: unsupported for a
  // tokenizer model or pre-tokenizer ember does not implement (naming it),
  // malformed_file for inconsistent metadata (naming the key). Warnings (a BPE
  // vocabulary without tokenizer.ggml.pre gets the default rule) go to `log`.
  static Tokenizer from_gguf(const gguf::File& file, const LogCallback& log = {});

  // Text to ids. `add_bos`: add the special tokens the model's metadata asks for
  // (BOS when tokenizer.ggml.add_bos_token, EOS when tokenizer.ggml.add_eos_token).
  // `parse_special`: control tokens written in the text (e.g. "<start_of_turn>")
  // become their ids; when off they are tokenized as plain text. User-defined
  // tokens are matched either way, as llama.cpp does. Any bytes are accepted.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;

  // Ids to text. Control and unknown tokens give their text only when
  // `render_special`; byte tokens give their byte, so the result may hold
  // invalid UTF-8 when `ids` ends inside a character. For vocabularies with a
  // dummy space prefix, one leading space of the first token's text is removed.
  // Throws invalid_argument for an id outside [0, n_vocab).
  std::string decode(std::span<const int32_t> ids, bool render_special) const;

  // The bytes one token stands for (what decode gives for it in the middle of a text).
  std::string token_piece(int32_t id, bool render_special) const;
  // The token's entry in the vocabulary, as stored (e.g. "▁Hello", "Ġworld",
  // "<0x0A>"); valid while this Tokenizer or a copy of it lives.
  std::string_view token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;
  float token_score(int32_t id) const;   // 0 when the file has no scores
  // The id whose vocabulary entry is exactly `text`.
  std::optional<int32_t> find_token(std::string_view text) const;

  int32_t n_vocab() const;
  int32_t bos() const;   // kNoToken when the vocabulary has none
  int32_t eos() const;
  int32_t eot() const;   // end of turn (<end_of_turn>, <|eot_id|>, <|im_end|>, ...)
  int32_t eom() const;   // end of message (<|eom_id|>)
  int32_t unk() const;
  int32_t pad() const;
  bool adds_bos() const;   // whether encode(add_bos = true) prepends BOS
  bool adds_eos() const;
  // Tokens that end a generation: EOS, EOT, EOM and the well-known end-of-turn
  // texts found in the vocabulary.
  bool is_end_of_generation(int32_t id) const;
  std::span<const int32_t> end_of_generation_ids() const;   // ascending

  TokenizerModel model() const;
  PreTokenizer pre_tokenizer() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
  friend class StreamDecoder;
};

// Decodes generated tokens one at a time. A token may end in the middle of a
// UTF-8 character (byte-fallback and byte-level BPE pieces); those bytes are held
// back until the character is complete, so each push() returns whole characters.
// The concatenation of every push() and the final flush() equals
// Tokenizer::decode(ids, render_special) except that no leading space is removed.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool render_special = false);

  // Text completed by this token (may be empty). Throws invalid_argument for a
  // bad id, leaving the decoder as it was.
  std::string push(int32_t id);
  // Whatever is held back (an unfinished character, as raw bytes), and resets.
  std::string flush();
  // Bytes currently held back.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::shared_ptr<const Tokenizer::Impl> impl_;
  bool render_special_ = false;
  std::string pending_;
};

}  // namespace ember::tok
