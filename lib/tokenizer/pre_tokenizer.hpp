// Pre-tokenizers as data: the table from tokenizer.ggml.pre names to a rule
// and its flags, and each rule as a list of split steps. A step is one of the
// regular expressions llama.cpp uses for that rule; the common ones (GPT-2,
// Llama-3, Qwen2) have hand-written splitters over codepoint classes, the
// rest run on the small matcher of split_pattern.hpp.
//
// Steps apply in order: the first splits the text, each later one splits
// every piece the previous step made (matches and the stretches between them
// alike), as llama.cpp's unicode_regex_split does.
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

// The spec for a tokenizer.ggml.pre value, or nullopt when the name is not
// in the table.
std::optional<PreTokenizerSpec> pre_tokenizer_spec(std::string_view name);

// The spec of a BPE vocabulary without tokenizer.ggml.pre (llama.cpp's default).
PreTokenizerSpec default_pre_tokenizer_spec();

// Hand-written splitters; each gives exactly the words of its pattern.
enum class HandWritten : uint8_t { none, gpt2, llama3, qwen2 };

struct SplitStep {
  HandWritten splitter = HandWritten::none;   // none: run `pattern` on the matcher
  std::string_view pattern;                    // the regular expression (split_pattern.hpp dialect)
};

// The steps of a rule (empty for PreTokenizer::none).
std::span<const SplitStep> split_steps(PreTokenizer rule);

// Splits `cps` (with `classes[i] == unicode::class_of(cps[i])`) into words and
// appends the end offset of each word, in codepoints, to `word_ends`.
void split_words(PreTokenizer rule, std::span<const uint32_t> cps, std::span<const unicode::ClassByte> classes,
                 std::vector<uint32_t>& word_ends);

// Runs one hand-written splitter on `cps`, appending `base` + each word end.
void split_hand_written(HandWritten splitter, std::span<const uint32_t> cps,
                        std::span<const unicode::ClassByte> classes, uint32_t base, std::vector<uint32_t>& word_ends);

}  // namespace ember::tok
