#include "tokenizer/pre_tokenizer.hpp"

namespace ember::tok {

using unicode::ClassByte;
using unicode::is_letter;
using unicode::is_number;
using unicode::is_whitespace;

namespace {

struct NamedSpec {
  std::string_view name;
  PreTokenizerSpec spec;
};

// tokenizer.ggml.pre values and the rule each one uses. Names that share a
// regular expression share a rule; the flags follow the values llama.cpp's
// converter writes for those models.
constexpr NamedSpec kPreTokenizers[] = {
    {"gpt-2", {PreTokenizer::gpt2, false, false}},
    {"phi-2", {PreTokenizer::gpt2, false, false}},
    {"roberta-bpe", {PreTokenizer::gpt2, false, false}},
    {"mpt", {PreTokenizer::gpt2, false, false}},
    {"olmo", {PreTokenizer::gpt2, false, false}},
    {"jais", {PreTokenizer::gpt2, false, false}},
    {"gigachat", {PreTokenizer::gpt2, false, false}},
    {"trillion", {PreTokenizer::gpt2, false, false}},
    {"llama3", {PreTokenizer::llama3, true, true}},
    {"llama-v3", {PreTokenizer::llama3, true, true}},
    {"llama-bpe", {PreTokenizer::llama3, true, true}},
    {"falcon3", {PreTokenizer::llama3, true, true}},
    {"pixtral", {PreTokenizer::llama3, true, true}},
    {"dbrx", {PreTokenizer::llama3, false, false}},
    {"smaug-bpe", {PreTokenizer::llama3, false, false}},
    {"qwen2", {PreTokenizer::qwen2, false, false}},
    {"deepseek-r1-qwen", {PreTokenizer::qwen2, false, false}},
    {"stablelm2", {PreTokenizer::qwen2, false, false}},
    {"megrez", {PreTokenizer::qwen2, false, false}},
};

bool is_newline(uint32_t cp) { return cp == '\r' || cp == '\n'; }

// Neither whitespace, letter nor number: the class [^\s\p{L}\p{N}].
bool is_other_symbol(ClassByte c) { return !is_whitespace(c) && !is_letter(c) && !is_number(c); }

uint32_t ascii_lower(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') ? cp + ('a' - 'A') : cp; }

// Length of the contraction 's 't 'm 'd 're 've 'll starting at i, or 0.
// `fold_case` makes it case-insensitive; ASCII folding is exact here (the
// generator checks that no other codepoint lower-cases to these letters).
size_t contraction_length(std::span<const uint32_t> cps, size_t i, bool fold_case) {
  const size_t n = cps.size();
  if (cps[i] != '\'' || i + 1 >= n) return 0;
  const uint32_t a = fold_case ? ascii_lower(cps[i + 1]) : cps[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= n) return 0;
  const uint32_t b = fold_case ? ascii_lower(cps[i + 2]) : cps[i + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S) then \s+, for a whitespace run [i, k): keep the last whitespace
// for the next word when something other than whitespace follows.
size_t whitespace_run_end(size_t i, size_t k, size_t n) { return (k - i > 1 && k < n) ? k - 1 : k; }

void split_gpt2(std::span<const uint32_t> cps, std::span<const ClassByte> cls, std::vector<uint32_t>& ends) {
  const size_t n = cps.size();
  size_t i = 0;
  while (i < n) {
    size_t end = i + contraction_length(cps, i, false);
    if (end == i) {
      // One optional leading space before a letter, number or symbol run.
      const size_t j = (cps[i] == ' ' && i + 1 < n) ? i + 1 : i;
      const ClassByte c = cls[j];
      if (is_letter(c)) {
        end = j + 1;
        while (end < n && is_letter(cls[end])) ++end;
      } else if (is_number(c)) {
        end = j + 1;
        while (end < n && is_number(cls[end])) ++end;
      } else if (is_other_symbol(c)) {
        end = j + 1;
        while (end < n && is_other_symbol(cls[end])) ++end;
      } else {
        // cps[i] is whitespace here (a space, or c itself).
        size_t k = i;
        while (k < n && is_whitespace(cls[k])) ++k;
        end = whitespace_run_end(i, k, n);
      }
    }
    ends.push_back(static_cast<uint32_t>(end));
    i = end;
  }
}

void split_llama3(std::span<const uint32_t> cps, std::span<const ClassByte> cls, size_t max_digits,
                  std::vector<uint32_t>& ends) {
  const size_t n = cps.size();
  size_t i = 0;
  while (i < n) {
    const uint32_t cp = cps[i];
    const ClassByte c = cls[i];
    size_t end = i + contraction_length(cps, i, true);
    if (end != i) {
      // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    } else if (!is_newline(cp) && !is_number(c) && (is_letter(c) || (i + 1 < n && is_letter(cls[i + 1])))) {
      // [^\r\n\p{L}\p{N}]?\p{L}+ : one optional non-letter prefix, then letters.
      end = i + 1;
      while (end < n && is_letter(cls[end])) ++end;
    } else if (is_number(c)) {
      // \p{N}{1,max_digits}
      end = i + 1;
      while (end < n && end - i < max_digits && is_number(cls[end])) ++end;
    } else {
      const size_t j = (cp == ' ' && i + 1 < n) ? i + 1 : i;
      if (is_other_symbol(cls[j])) {
        // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
        end = j + 1;
        while (end < n && is_other_symbol(cls[end])) ++end;
        while (end < n && is_newline(cps[end])) ++end;
      } else {
        // cps[i] is whitespace: \s*[\r\n]+ (up to the last newline of the run),
        // else \s+(?!\S) | \s+.
        size_t k = i;
        size_t after_last_newline = 0;
        while (k < n && is_whitespace(cls[k])) {
          if (is_newline(cps[k])) after_last_newline = k + 1;
          ++k;
        }
        end = after_last_newline != 0 ? after_last_newline : whitespace_run_end(i, k, n);
      }
    }
    ends.push_back(static_cast<uint32_t>(end));
    i = end;
  }
}

}  // namespace

std::optional<PreTokenizerSpec> pre_tokenizer_spec(std::string_view name) {
  for (const NamedSpec& entry : kPreTokenizers) {
    if (entry.name == name) return entry.spec;
  }
  return std::nullopt;
}

void split_words(PreTokenizer rule, std::span<const uint32_t> cps, std::span<const ClassByte> classes,
                 std::vector<uint32_t>& word_ends) {
  switch (rule) {
    case PreTokenizer::gpt2: split_gpt2(cps, classes, word_ends); return;
    case PreTokenizer::llama3: split_llama3(cps, classes, 3, word_ends); return;
    case PreTokenizer::qwen2: split_llama3(cps, classes, 1, word_ends); return;
    case PreTokenizer::none: break;
  }
  // No rule: the whole text is one word.
  if (!cps.empty()) word_ends.push_back(static_cast<uint32_t>(cps.size()));
}

}  // namespace ember::tok
