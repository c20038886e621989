// The vocabulary of a tokenizer as read from GGUF metadata (tokenizer.ggml.*),
// with the lookup structures every encoder and decoder shares.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.hpp"

namespace ember::gguf {
class File;
}

namespace ember::tok {

// One BPE merge: the pair (left, right) of token ids becomes `result`.
struct Merge {
  int32_t rank = 0;     // position in tokenizer.ggml.merges; lower merges first
  int32_t result = 0;   // token id of left + right
};

struct Vocab {
  TokenizerModel model = TokenizerModel::spm;
  PreTokenizer pre = PreTokenizer::none;

  // Token texts, concatenated: token i is text_blob[offsets[i], offsets[i + 1]).
  std::string text_blob;
  std::vector<uint32_t> offsets;        // [n_tokens + 1]
  std::vector<float> scores;            // [n_tokens], 0 when the file has none
  std::vector<TokenType> types;         // [n_tokens], normal when the file has none
  std::unordered_map<std::string_view, int32_t> by_text;   // views into text_blob; empty texts left out

  int32_t bos = kNoToken;
  int32_t eos = kNoToken;
  int32_t eot = kNoToken;
  int32_t eom = kNoToken;
  int32_t unk = kNoToken;
  int32_t pad = kNoToken;
  std::vector<int32_t> eog_ids;         // ascending, unique

  bool add_bos = false;                 // tokenizer.ggml.add_bos_token (default per model)
  bool add_eos = false;                 // tokenizer.ggml.add_eos_token
  bool add_space_prefix = false;        // SPM: prefix text (and text after a special token) with a space
  bool ignore_merges = false;           // BPE (Llama-3): a word that is a token is taken whole

  // SPM: the id standing for each byte when a character has no piece: <0xNN>,
  // else the one-byte piece, else <unk>; kNoToken when none of these exists.
  std::array<int32_t, 256> byte_fallback{};
  // BPE: the id of the one-character piece each byte maps to (GPT-2 byte map).
  std::array<int32_t, 256> byte_piece{};
  // BPE merges keyed by (left << 32) | right.
  std::unordered_map<uint64_t, Merge> merges;

  int32_t n_tokens() const { return static_cast<int32_t>(types.size()); }
  std::string_view text(int32_t id) const {
    return std::string_view(text_blob).substr(offsets[id], offsets[id + 1] - offsets[id]);
  }
  int32_t find(std::string_view text) const {
    const auto it = by_text.find(text);
    return it == by_text.end() ? kNoToken : it->second;
  }
  const Merge* find_merge(int32_t left, int32_t right) const {
    const auto it = merges.find((static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
                                static_cast<uint32_t>(right));
    return it == merges.end() ? nullptr : &it->second;
  }
};

// Reads and validates the vocabulary. Throws unsupported (tokenizer model or
// pre-tokenizer ember does not implement) or malformed_file (naming the key).
// Warnings go to `log` (may be empty).
Vocab load_vocab(const gguf::File& file, const LogCallback& log);

}  // namespace ember::tok
