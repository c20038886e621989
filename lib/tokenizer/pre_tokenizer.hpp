// Pre-tokenizer rules of byte-level BPE vocabularies: split text into words
// before merging. Each rule is the regular expression its model was trained
// with, written out by hand over codepoint classes (std::regex has no \p{L}
// and is far too slow for long prompts).
//
//   gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2:  as llama3 with \p{N} instead of \p{N}{1,3}
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode.hpp"

namespace ember::tok {

// How a tokenizer.ggml.pre name is handled.
struct PreTokenizerSpec {
  PreTokenizer rule = PreTokenizer::gpt2;
  bool ignore_merges = false;   // a word that is itself a token is not merged further
  bool add_bos = false;         // default of tokenizer.ggml.add_bos_token
};

// The spec for a tokenizer.ggml.pre value, or nullopt when ember does not
// implement that pre-tokenizer.
std::optional<PreTokenizerSpec> pre_tokenizer_spec(std::string_view name);

// Splits `cps` (with `classes[i] == unicode::class_of(cps[i])`) into words and
// appends the end offset of each word, in codepoints, to `word_ends`.
void split_words(PreTokenizer rule, std::span<const uint32_t> cps, std::span<const unicode::ClassByte> classes,
                 std::vector<uint32_t>& word_ends);

}  // namespace ember::tok
