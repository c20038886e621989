// The pre-tokenizer table and rules; see pre_tokenizer.hpp and docs/tokenizer.md.
#include "tokenizer/pre_tokenizer.hpp"

#include <array>

#include "tokenizer/split_pattern.hpp"

namespace ember::tok {

using unicode::ClassByte;
using unicode::is_letter;
using unicode::is_number;
using unicode::is_whitespace;

namespace {

// ---------------------------------------------------------------------------
// The split patterns: the regular expressions the models were trained with,
// as llama.cpp writes them (case-insensitive groups spelled out as [sS] pairs,
// since std::regex has no (?i:...)). Sources: the tokenizer.json of each
// family, through llama.cpp's src/llama-vocab.cpp.

constexpr std::string_view kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr std::string_view kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kSingleDigit = "\\p{N}";
constexpr std::string_view kDigitRun = "\\p{N}+";
constexpr std::string_view kNewline = "[\\r\\n]";
constexpr std::string_view kThreeAsciiDigits = "[0-9][0-9][0-9]";
constexpr std::string_view kCjkHangul = "[一-龥ࠀ-一가-퟿]+";
constexpr std::string_view kBloom = " ?[^(\\s|.,!?…。，、।۔،)]+";

constexpr SplitStep kGpt2Steps[] = {{HandWritten::gpt2, kGpt2}};
constexpr SplitStep kLlama3Steps[] = {{HandWritten::llama3, kLlama3}};
constexpr SplitStep kQwen2Steps[] = {{HandWritten::qwen2, kQwen2}};
constexpr SplitStep kDefaultSteps[] = {
    {HandWritten::none, "[\\p{P}\\$\\+<=>\\^~\\|]+"},
    {HandWritten::gpt2, kGpt2},
    {HandWritten::none, kDigitRun},
    {HandWritten::none, kThreeAsciiDigits},
};
constexpr SplitStep kDeepseekLlmSteps[] = {
    {HandWritten::none, kNewline},
    {HandWritten::none,
     "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ"
     "-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐ"
     "ῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯ"
     "ꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+"},
    {HandWritten::none, "\\s?[!-/:-~！-／：-～‘-‟　-。]+"},
    {HandWritten::none, "\\s+$"},
    {HandWritten::none, kCjkHangul},
    {HandWritten::none, kDigitRun},
};
constexpr SplitStep kDeepseekCoderSteps[] = {
    {HandWritten::none, kNewline},
    {HandWritten::none, "\\s?\\p{L}+"},
    {HandWritten::none, "\\s?\\p{P}+"},
    {HandWritten::none, kCjkHangul},
    {HandWritten::none, kSingleDigit},
};
constexpr SplitStep kDeepseekV3Steps[] = {
    {HandWritten::none, "\\p{N}{1,3}"},
    {HandWritten::none, "[一-龥぀-ゟ゠-ヿ]+"},
    {HandWritten::none,
     "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
     "?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};
constexpr SplitStep kFalconSteps[] = {
    {HandWritten::none, "[\\p{P}\\$\\+<=>\\^~\\|`]+"},
    {HandWritten::gpt2, kGpt2},
    {HandWritten::none, kThreeAsciiDigits},
};
constexpr SplitStep kStarcoderSteps[] = {
    {HandWritten::none, kSingleDigit},
    {HandWritten::gpt2, kGpt2},
};
constexpr SplitStep kBloomSteps[] = {{HandWritten::none, kBloom}};
constexpr SplitStep kVikingSteps[] = {{HandWritten::none, kBloom}, {HandWritten::none, kSingleDigit}};
// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}] of the
// original, as llama.cpp approximates them: a letter that is not a-z, and a
// letter that is not A-Z.
constexpr SplitStep kTekkenSteps[] = {
    {HandWritten::none,
     "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+(("
     "?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};
constexpr SplitStep kChameleonSteps[] = {
    {HandWritten::none, "<sentinel:[0-9]+>"},
    {HandWritten::none, "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z"},
    {HandWritten::none, "([\\t\\n]|    |  )"},
    {HandWritten::none, kSingleDigit},
    {HandWritten::none, "[\\p{P}!-/:-@\\[-`{-~]"},
    {HandWritten::gpt2, kGpt2},
};
constexpr SplitStep kGpt4oSteps[] = {
    {HandWritten::none,
     "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL]["
     "lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'["
     "mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};
// The digits of a run in groups of three counted from its end (an empty match
// before each group).
constexpr SplitStep kSuperbpeSteps[] = {
    {HandWritten::none, kDigitRun},
    {HandWritten::none, "(?=(\\d{3})+(?!\\d))"},
};
constexpr SplitStep kBailingmoeSteps[] = {
    {HandWritten::none,
     "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"},
};
constexpr SplitStep kSeedCoderSteps[] = {
    {HandWritten::none,
     "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| "
     "?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

struct RuleSteps {
  PreTokenizer rule;
  std::string_view name;
  std::span<const SplitStep> steps;
};

constexpr RuleSteps kRules[] = {
    {PreTokenizer::none, "none", {}},
    {PreTokenizer::gpt2, "gpt2", kGpt2Steps},
    {PreTokenizer::llama3, "llama3", kLlama3Steps},
    {PreTokenizer::qwen2, "qwen2", kQwen2Steps},
    {PreTokenizer::default_bpe, "default", kDefaultSteps},
    {PreTokenizer::deepseek_llm, "deepseek_llm", kDeepseekLlmSteps},
    {PreTokenizer::deepseek_coder, "deepseek_coder", kDeepseekCoderSteps},
    {PreTokenizer::deepseek_v3, "deepseek_v3", kDeepseekV3Steps},
    {PreTokenizer::falcon, "falcon", kFalconSteps},
    {PreTokenizer::starcoder, "starcoder", kStarcoderSteps},
    {PreTokenizer::bloom, "bloom", kBloomSteps},
    {PreTokenizer::viking, "viking", kVikingSteps},
    {PreTokenizer::tekken, "tekken", kTekkenSteps},
    {PreTokenizer::chameleon, "chameleon", kChameleonSteps},
    {PreTokenizer::gpt4o, "gpt4o", kGpt4oSteps},
    {PreTokenizer::superbpe, "superbpe", kSuperbpeSteps},
    {PreTokenizer::bailingmoe, "bailingmoe", kBailingmoeSteps},
    {PreTokenizer::seed_coder, "seed_coder", kSeedCoderSteps},
};
constexpr size_t kRuleCount = std::size(kRules);

// ---------------------------------------------------------------------------
// tokenizer.ggml.pre values (every name llama.cpp's loader accepts) and the
// rule and flags of each; the flags are the ones llama.cpp sets for the name.

struct NamedSpec {
  std::string_view name;
  PreTokenizerSpec spec;
};

constexpr PreTokenizerSpec plain(PreTokenizer rule) { return {rule, false, false}; }
// Llama-3 style: a word that is a token is taken whole, and BOS is added.
constexpr PreTokenizerSpec whole_words_bos(PreTokenizer rule) { return {rule, true, true}; }

constexpr NamedSpec kPreTokenizers[] = {
    {"default", plain(PreTokenizer::default_bpe)},
    {"llama3", whole_words_bos(PreTokenizer::llama3)},
    {"llama-v3", whole_words_bos(PreTokenizer::llama3)},
    {"llama-bpe", whole_words_bos(PreTokenizer::llama3)},
    {"falcon3", whole_words_bos(PreTokenizer::llama3)},
    {"pixtral", whole_words_bos(PreTokenizer::llama3)},
    {"deepseek-llm", plain(PreTokenizer::deepseek_llm)},
    {"deepseek-coder", plain(PreTokenizer::deepseek_coder)},
    {"deepseek-v3", plain(PreTokenizer::deepseek_v3)},
    {"falcon", plain(PreTokenizer::falcon)},
    {"mpt", plain(PreTokenizer::gpt2)},
    {"starcoder", plain(PreTokenizer::starcoder)},
    {"gpt-2", plain(PreTokenizer::gpt2)},
    {"phi-2", plain(PreTokenizer::gpt2)},
    {"jina-es", plain(PreTokenizer::gpt2)},
    {"jina-de", plain(PreTokenizer::gpt2)},
    {"gigachat", plain(PreTokenizer::gpt2)},
    {"jina-v1-en", plain(PreTokenizer::gpt2)},
    {"jina-v2-es", plain(PreTokenizer::gpt2)},
    {"jina-v2-de", plain(PreTokenizer::gpt2)},
    {"jina-v2-code", plain(PreTokenizer::gpt2)},
    {"roberta-bpe", plain(PreTokenizer::gpt2)},
    {"refact", plain(PreTokenizer::starcoder)},
    {"command-r", plain(PreTokenizer::starcoder)},
    {"qwen2", plain(PreTokenizer::qwen2)},
    {"deepseek-r1-qwen", plain(PreTokenizer::qwen2)},
    {"stablelm2", plain(PreTokenizer::qwen2)},
    {"olmo", plain(PreTokenizer::gpt2)},
    {"dbrx", plain(PreTokenizer::llama3)},
    {"smaug-bpe", plain(PreTokenizer::llama3)},
    {"poro-chat", plain(PreTokenizer::bloom)},
    {"glm4", plain(PreTokenizer::llama3)},
    {"chatglm-bpe", plain(PreTokenizer::llama3)},
    {"viking", plain(PreTokenizer::viking)},
    {"jais", plain(PreTokenizer::gpt2)},
    {"tekken", whole_words_bos(PreTokenizer::tekken)},
    {"smollm", plain(PreTokenizer::starcoder)},
    {"codeshell", plain(PreTokenizer::starcoder)},
    {"bloom", plain(PreTokenizer::bloom)},
    {"gpt3-finnish", plain(PreTokenizer::bloom)},
    {"exaone", plain(PreTokenizer::starcoder)},
    {"chameleon", {PreTokenizer::chameleon, false, true}},
    {"minerva-7b", plain(PreTokenizer::starcoder)},
    {"megrez", plain(PreTokenizer::qwen2)},
    {"gpt-4o", plain(PreTokenizer::gpt4o)},
    {"llama4", plain(PreTokenizer::gpt4o)},
    {"superbpe", plain(PreTokenizer::superbpe)},
    {"trillion", plain(PreTokenizer::gpt2)},
    {"bailingmoe", plain(PreTokenizer::bailingmoe)},
    {"seed-coder", plain(PreTokenizer::seed_coder)},
};

// ---------------------------------------------------------------------------
// Hand-written splitters.

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

void split_gpt2(std::span<const uint32_t> cps, std::span<const ClassByte> cls, uint32_t base,
                std::vector<uint32_t>& ends) {
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
    ends.push_back(base + static_cast<uint32_t>(end));
    i = end;
  }
}

void split_llama3(std::span<const uint32_t> cps, std::span<const ClassByte> cls, size_t max_digits, uint32_t base,
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
    ends.push_back(base + static_cast<uint32_t>(end));
    i = end;
  }
}


// The compiled patterns of every rule, built once.
struct CompiledRules {
  std::array<std::vector<SplitPattern>, kRuleCount> patterns;   // [rule][step]; hand-written steps hold none
  CompiledRules() {
    for (const RuleSteps& r : kRules) {
      for (const SplitStep& step : r.steps) {
        if (step.splitter == HandWritten::none) patterns[static_cast<size_t>(r.rule)].emplace_back(step.pattern);
      }
    }
  }
};

const CompiledRules& compiled_rules() {
  static const CompiledRules rules;
  return rules;
}

const RuleSteps& rule_steps(PreTokenizer rule) {
  const auto index = static_cast<size_t>(rule);
  return kRules[index < kRuleCount ? index : 0];
}

}  // namespace

std::string_view pre_tokenizer_rule_name(PreTokenizer rule) { return rule_steps(rule).name; }

std::vector<std::string_view> supported_pre_tokenizers() {
  std::vector<std::string_view> names;
  for (const NamedSpec& entry : kPreTokenizers) names.push_back(entry.name);
  return names;
}

std::optional<PreTokenizerSpec> pre_tokenizer_spec(std::string_view name) {
  for (const NamedSpec& entry : kPreTokenizers) {
    if (entry.name == name) return entry.spec;
  }
  return std::nullopt;
}

PreTokenizerSpec default_pre_tokenizer_spec() { return plain(PreTokenizer::default_bpe); }

std::span<const SplitStep> split_steps(PreTokenizer rule) { return rule_steps(rule).steps; }

void split_hand_written(HandWritten splitter, std::span<const uint32_t> cps, std::span<const ClassByte> classes,
                        uint32_t base, std::vector<uint32_t>& word_ends) {
  switch (splitter) {
    case HandWritten::gpt2: split_gpt2(cps, classes, base, word_ends); return;
    case HandWritten::llama3: split_llama3(cps, classes, 3, base, word_ends); return;
    case HandWritten::qwen2: split_llama3(cps, classes, 1, base, word_ends); return;
    case HandWritten::none: break;
  }
  if (!cps.empty()) word_ends.push_back(base + static_cast<uint32_t>(cps.size()));
}

void split_words(PreTokenizer rule, std::span<const uint32_t> cps, std::span<const ClassByte> classes,
                 std::vector<uint32_t>& word_ends) {
  const std::span<const SplitStep> steps = split_steps(rule);
  if (cps.empty()) return;
  if (steps.empty()) {
    word_ends.push_back(static_cast<uint32_t>(cps.size()));   // no rule: the whole text is one word
    return;
  }
  if (steps.size() == 1 && steps[0].splitter != HandWritten::none) {
    split_hand_written(steps[0].splitter, cps, classes, 0, word_ends);   // the common case, straight through
    return;
  }

  // The symbols each view of the matcher sees, made when a step needs them.
  std::vector<uint32_t> collapsed, codepoints;
  const auto symbols = [&](SymbolView view) -> std::span<const uint32_t> {
    std::vector<uint32_t>& out = view == SymbolView::collapsed ? collapsed : codepoints;
    if (out.empty()) {
      out.resize(cps.size());
      for (size_t i = 0; i < cps.size(); ++i) {
        out[i] = view == SymbolView::collapsed ? collapsed_symbol(cps[i], classes[i])
                                               : codepoint_symbol(cps[i], classes[i]);
      }
    }
    return out;
  };

  const std::vector<SplitPattern>& patterns = compiled_rules().patterns[static_cast<size_t>(rule)];
  size_t next_pattern = 0;
  SplitScratch scratch;
  std::vector<uint32_t> pieces = {static_cast<uint32_t>(cps.size())};
  std::vector<uint32_t> split;
  for (const SplitStep& step : steps) {
    const SplitPattern* pattern = step.splitter == HandWritten::none ? &patterns[next_pattern++] : nullptr;
    const std::span<const uint32_t> view = pattern ? symbols(pattern->view()) : std::span<const uint32_t>();
    split.clear();
    uint32_t start = 0;
    for (const uint32_t end : pieces) {
      if (pattern) {
        pattern->split(view.subspan(start, end - start), start, scratch, split);
      } else {
        split_hand_written(step.splitter, cps.subspan(start, end - start), classes.subspan(start, end - start), start,
                           split);
      }
      start = end;
    }
    pieces.swap(split);
  }
  word_ends.insert(word_ends.end(), pieces.begin(), pieces.end());
}

}  // namespace ember::tok
