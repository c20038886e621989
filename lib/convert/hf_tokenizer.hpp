// The tokenizer of a Hugging Face checkpoint as llama.cpp's converter writes it into GGUF:
// SentencePiece (tokenizer.model) or byte-level BPE (tokenizer.json), added and special
// tokens, the chat template (docs/convert.md says which rules come from where).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "convert/hf_config.hpp"
#include "gguf/gguf.hpp"

namespace ember::convert {

struct Vocab {
  std::string model = "llama";    // tokenizer.ggml.model: llama (SentencePiece) or gpt2 (byte-level BPE)
  std::string pre = "default";    // tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<float> scores;      // SentencePiece only
  std::vector<int32_t> types;     // GGUF token types: 1 normal .. 6 byte
  std::vector<std::string> merges;   // BPE only
};

// gguf-py's SpecialVocab (without merges), in the order found.
struct SpecialTokens {
  std::vector<std::pair<std::string, uint32_t>> ids;   // type (bos, eos, ...) -> id
  std::vector<std::pair<std::string, bool>> add;       // add_<type>_token
  std::optional<std::string> chat_template;
};

// The vocabulary `arch`'s converter class reads from `dir` (warnings appended for renamed
// or skipped tokens). Throws unsupported for tokenizer kinds not converted.
Vocab read_vocabulary(const std::filesystem::path& dir, const Config& config, Arch arch,
                      std::vector<std::string>& warnings);

// Special token ids (checked against `n_vocab`), add flags and the chat template.
SpecialTokens special_tokens(const std::filesystem::path& dir, int64_t n_vocab, std::vector<std::string>& warnings);

// Writes the tokenizer.* keys.
void add_tokenizer(gguf::Writer& w, const Vocab& v, const SpecialTokens& s);

}  // namespace ember::convert
