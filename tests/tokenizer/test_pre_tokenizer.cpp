#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "common/paths.hpp"
#include "ember/error.hpp"
#include "tok_test_util.hpp"
#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/split_pattern.hpp"
#include "tokenizer/unicode.hpp"

using ember::tok::PreTokenizer;

namespace {

std::vector<std::string> split(PreTokenizer rule, std::string_view text) {
  std::vector<uint32_t> cps;
  ember::tok::unicode::append_codepoints(text, cps);
  std::vector<ember::tok::unicode::ClassByte> classes;
  for (const uint32_t cp : cps) classes.push_back(ember::tok::unicode::class_of(cp));
  std::vector<uint32_t> ends;
  ember::tok::split_words(rule, cps, classes, ends);
  std::vector<std::string> words;
  uint32_t start = 0;
  for (const uint32_t end : ends) {
    std::string w;
    for (uint32_t i = start; i < end; ++i) ember::tok::unicode::append_utf8(w, cps[i]);
    words.push_back(w);
    start = end;
  }
  return words;
}

using Words = std::vector<std::string>;

}  // namespace

TEST_CASE("pre-tokenizer gpt2", "[pre_tokenizer]") {
  CHECK(split(PreTokenizer::gpt2, "Hello world's 123  x") == Words{"Hello", " world", "'s", " 123", " ", " x"});
  CHECK(split(PreTokenizer::gpt2, "I'M") == Words{"I", "'", "M"});   // case-sensitive contractions
  CHECK(split(PreTokenizer::gpt2, "we'll've") == Words{"we", "'ll", "'ve"});
  CHECK(split(PreTokenizer::gpt2, "a   ") == Words{"a", "   "});     // trailing run kept whole
  CHECK(split(PreTokenizer::gpt2, "a\n\nb") == Words{"a", "\n", "\n", "b"});
  CHECK(split(PreTokenizer::gpt2, "x  \n y") == Words{"x", "  \n", " y"});
  CHECK(split(PreTokenizer::gpt2, "hi!!! ?? 12ab") == Words{"hi", "!!!", " ??", " 12", "ab"});
  CHECK(split(PreTokenizer::gpt2, "Cafe\xCC\x81 x") == Words{"Cafe", "\xCC\x81", " x"});   // a mark is not a letter
  CHECK(split(PreTokenizer::gpt2, "").empty());
}

TEST_CASE("pre-tokenizer llama3", "[pre_tokenizer]") {
  CHECK(split(PreTokenizer::llama3, "I'M 12345 abc\n\n  x") ==
        Words{"I", "'M", " ", "123", "45", " abc", "\n\n", " ", " x"});
  CHECK(split(PreTokenizer::llama3, "hello!!!\n\nworld") == Words{"hello", "!!!\n\n", "world"});
  CHECK(split(PreTokenizer::llama3, "(x) \tfoo") == Words{"(x", ")", " ", "\tfoo"});
  CHECK(split(PreTokenizer::llama3, "  \n  \n  x") == Words{"  \n  \n", " ", " x"});
  CHECK(split(PreTokenizer::llama3, "a1234567") == Words{"a", "123", "456", "7"});
  CHECK(split(PreTokenizer::llama3, "\r\nx") == Words{"\r\n", "x"});
}

TEST_CASE("pre-tokenizer qwen2: every digit alone", "[pre_tokenizer]") {
  CHECK(split(PreTokenizer::qwen2, "12345") == Words{"1", "2", "3", "4", "5"});
  CHECK(split(PreTokenizer::qwen2, "I'M 42 abc") == Words{"I", "'M", " ", "4", "2", " abc"});
}

TEST_CASE("pre-tokenizer names", "[pre_tokenizer]") {
  const auto llama = ember::tok::pre_tokenizer_spec("llama-bpe");
  REQUIRE(llama);
  CHECK(llama->rule == PreTokenizer::llama3);
  CHECK(llama->ignore_merges);
  CHECK(llama->add_bos);
  const auto dbrx = ember::tok::pre_tokenizer_spec("dbrx");
  REQUIRE(dbrx);
  CHECK(dbrx->rule == PreTokenizer::llama3);
  CHECK_FALSE(dbrx->ignore_merges);
  const auto qwen = ember::tok::pre_tokenizer_spec("qwen2");
  REQUIRE(qwen);
  CHECK(qwen->rule == PreTokenizer::qwen2);
  CHECK_FALSE(qwen->ignore_merges);
  CHECK(ember::tok::pre_tokenizer_spec("gpt-2")->rule == PreTokenizer::gpt2);
  CHECK(ember::tok::pre_tokenizer_spec("deepseek-llm")->rule == PreTokenizer::deepseek_llm);
  CHECK(ember::tok::pre_tokenizer_spec("command-r")->rule == PreTokenizer::starcoder);
  const auto tekken = ember::tok::pre_tokenizer_spec("tekken");
  REQUIRE(tekken);
  CHECK(tekken->ignore_merges);
  CHECK(tekken->add_bos);
  const auto chameleon = ember::tok::pre_tokenizer_spec("chameleon");
  REQUIRE(chameleon);
  CHECK_FALSE(chameleon->ignore_merges);
  CHECK(chameleon->add_bos);
  CHECK(ember::tok::default_pre_tokenizer_spec().rule == PreTokenizer::default_bpe);
  CHECK_FALSE(ember::tok::pre_tokenizer_spec(""));
  CHECK_FALSE(ember::tok::pre_tokenizer_spec("no-such-rule"));
  CHECK_FALSE(ember::tok::pre_tokenizer_spec("GPT-2"));   // names are case-sensitive, as in llama.cpp
}

TEST_CASE("pre-tokenizer names: the list covers every rule, once per name", "[pre_tokenizer]") {
  const std::vector<std::string_view> names = ember::tok::supported_pre_tokenizers();
  CHECK(names.size() == 50);   // the names llama.cpp's loader accepts for byte-level BPE
  std::set<std::string_view> unique(names.begin(), names.end());
  CHECK(unique.size() == names.size());
  std::set<PreTokenizer> rules;
  for (const std::string_view name : names) {
    const auto spec = ember::tok::pre_tokenizer_spec(name);
    REQUIRE(spec);
    rules.insert(spec->rule);
    CHECK_FALSE(ember::tok::split_steps(spec->rule).empty());
  }
  CHECK(rules.size() == 17);   // every rule but `none` has a name
  CHECK_FALSE(rules.count(PreTokenizer::none));
  CHECK(ember::tok::pre_tokenizer_rule_name(PreTokenizer::deepseek_v3) == "deepseek_v3");
  CHECK(ember::tok::split_steps(PreTokenizer::none).empty());
}

// ---------------------------------------------------------------------------
// The matcher (split_pattern.hpp) and the hand-written splitters.

namespace {

std::vector<std::string> split_with_pattern(std::string_view pattern, std::string_view text) {
  const ember::tok::SplitPattern compiled(pattern);
  std::vector<uint32_t> cps, symbols;
  ember::tok::unicode::append_codepoints(text, cps);
  for (const uint32_t cp : cps) {
    const auto c = ember::tok::unicode::class_of(cp);
    symbols.push_back(compiled.view() == ember::tok::SymbolView::collapsed ? ember::tok::collapsed_symbol(cp, c)
                                                                          : ember::tok::codepoint_symbol(cp, c));
  }
  ember::tok::SplitScratch scratch;
  std::vector<uint32_t> ends;
  compiled.split(symbols, 0, scratch, ends);
  std::vector<std::string> words;
  uint32_t start = 0;
  for (const uint32_t end : ends) {
    std::string w;
    for (uint32_t i = start; i < end; ++i) ember::tok::unicode::append_utf8(w, cps[i]);
    words.push_back(w);
    start = end;
  }
  return words;
}

// Texts for comparing splitters: the vector texts plus random mixes of the
// characters the rules treat differently.
std::vector<std::string> comparison_texts() {
  std::vector<std::string> texts;
  const std::string all = ember::test::read_bytes(ember::test::data_dir() / "tokenizer" / "pre_tokenizers.inp");
  static constexpr std::string_view kSeparator = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0, next; (next = all.find(kSeparator, pos)) != std::string::npos; pos = next + kSeparator.size()) {
    texts.push_back(all.substr(pos, next - pos));
  }
  static const char* const kPieces[] = {" ", "  ", "\n", "\r\n", "\t", "a", "Ab", "ZZ", "'s", "'LL", "'", "1", "23",
                                        "4567", "!", "?!", "~", "`", "\xC3\xA9", "\xE4\xB8\xAD", "\xD9\xA3",
                                        "\xC2\xA0", "\xE2\x80\xA8", "\xCC\x81", "\xF0\x9F\x98\x80", "\xC2\x85",
                                        "\xE3\x80\x80", "(", ")", "|", "."};
  uint32_t state = 12345;
  for (int t = 0; t < 400; ++t) {
    std::string text;
    const int length = 1 + t % 24;
    for (int i = 0; i < length; ++i) {
      state = state * 1664525u + 1013904223u;
      text += kPieces[(state >> 8) % std::size(kPieces)];
    }
    texts.push_back(text);
  }
  return texts;
}

}  // namespace

TEST_CASE("split patterns: the hand-written splitters give the words of their patterns", "[pre_tokenizer]") {
  for (const PreTokenizer rule : {PreTokenizer::gpt2, PreTokenizer::llama3, PreTokenizer::qwen2}) {
    const auto steps = ember::tok::split_steps(rule);
    REQUIRE(steps.size() == 1);
    REQUIRE(steps[0].splitter != ember::tok::HandWritten::none);
    size_t same = 0;
    const std::vector<std::string> texts = comparison_texts();
    for (const std::string& text : texts) {
      INFO(ember::tok::pre_tokenizer_rule_name(rule) << " text: '" << text << "'");
      const Words by_hand = split(rule, text);
      CHECK(by_hand == split_with_pattern(steps[0].pattern, text));
      if (by_hand == split_with_pattern(steps[0].pattern, text)) ++same;
    }
    CHECK(same == texts.size());
  }
}

TEST_CASE("split patterns: matcher semantics", "[pre_tokenizer]") {
  // Leftmost-first alternation, not longest.
  CHECK(split_with_pattern("a|ab", "abab") == Words{"a", "b", "a", "b"});
  // Greedy quantifiers with backtracking, counted repetition, groups.
  CHECK(split_with_pattern("\\s+(?!\\S)", "a   b") == Words{"a", "  ", " b"});
  CHECK(split_with_pattern("(IMGIMG)((A|B){1,2})Z", "xIMGIMGABZIMGIMGZ") == Words{"x", "IMGIMGABZ", "IMGIMGZ"});
  CHECK(split_with_pattern("[0-9]{2,3}", "1234567") == Words{"123", "456", "7"});
  // $ is the end of the piece.
  CHECK(split_with_pattern("\\s+$", "a  b  ") == Words{"a  b", "  "});
  // Empty matches: the digits of a run in groups of three from its end.
  CHECK(split_with_pattern("(?=(\\d{3})+(?!\\d))", "1234567") == Words{"1", "234", "567"});
  CHECK(split_with_pattern("(?=(\\d{3})+(?!\\d))", "123456") == Words{"123", "456"});
  // The collapsed view: non-ASCII letters are \p{L}, '~' is not \p{S} (as in llama.cpp).
  CHECK(split_with_pattern("\\p{L}+", "ab\xC3\xA9" "c d") == Words{"ab\xC3\xA9" "c", " ", "d"});
  CHECK(split_with_pattern("[\\p{S}]+", "a+~$b") == Words{"a", "+", "~", "$", "b"});
  // The codepoint view: ranges over codepoints, non-ASCII whitespace is \s.
  CHECK(split_with_pattern("[\xE4\xB8\x80-\xE9\xBE\xA5]+", "ab\xE4\xB8\xAD\xE6\x96\x87" "cd") ==
        Words{"ab", "\xE4\xB8\xAD\xE6\x96\x87", "cd"});
  // Stretches between matches are one word, however many characters failed.
  CHECK(split_with_pattern(" ?[^(\\s|.,)]+", "a\xE3\x80\x80" "b (c)") ==
        Words{"a", "\xE3\x80\x80", "b", " (", "c", ")"});
}

TEST_CASE("split patterns: long runs take linear time", "[pre_tokenizer]") {
  // A whitespace run that is not at the end: a plain backtracker retries \s+
  // from every position (quadratic); the matcher remembers failed states.
  std::string text(200000, ' ');
  text += "1";
  const auto words = split_with_pattern("\\s+$", text);
  CHECK(words == Words{text});
  std::vector<uint32_t> cps;
  ember::tok::unicode::append_codepoints(text, cps);
  std::vector<ember::tok::unicode::ClassByte> classes;
  for (const uint32_t cp : cps) classes.push_back(ember::tok::unicode::class_of(cp));
  std::vector<uint32_t> ends;
  ember::tok::split_words(PreTokenizer::deepseek_llm, cps, classes, ends);
  CHECK(ends.size() == 2);

  // superbpe's look-ahead over a long digit run: evaluated at every position,
  // it reuses the states that failed before instead of rescanning the run.
  const std::string digits(200000, '7');
  const auto groups = split_with_pattern("(?=(\\d{3})+(?!\\d))", digits);
  REQUIRE(groups.size() == 66667);
  CHECK(groups.front() == "77");
  CHECK(groups.back() == "777");
}

TEST_CASE("split patterns: a pattern outside the dialect is an internal error", "[pre_tokenizer][errors]") {
  const auto expect_internal = [](std::string_view pattern, std::string_view fragment) {
    try {
      ember::tok::SplitPattern compiled(pattern);
      FAIL("compiled '" << pattern << "'");
    } catch (const ember::Error& e) {
      CHECK(e.code() == ember::ErrorCode::internal);
      CHECK(std::string(e.what()).find(fragment) != std::string::npos);
    }
  };
  expect_internal("a(b", "unexpected end");
  expect_internal("ab)", "unexpected ')'");
  expect_internal("a.b", "unsupported or misplaced operator");
  expect_internal("\\p{L}\xC3\xA9", "non-ASCII character in a pattern with \\p{..}");
  expect_internal("a*?", "lazy and possessive quantifiers are not supported");
  expect_internal("[b-a]", "bad range");
  expect_internal("(?<=a)b", "unsupported group");
}

// The words themselves, against llama.cpp's unicode_regex_split() run with the
// patterns of llama.cpp's source (tests/data/tokenizer/pre_words, see the
// README). $EMBER_PRE_WORDS_DIR may point at another folder holding a
// pre_tokenizers.inp and a pre_words/ made the same way (e.g. random texts).
TEST_CASE("pre-tokenizer words: every rule gives llama.cpp's words", "[pre_tokenizer][vectors]") {
  auto dir = ember::test::data_dir() / "tokenizer";
  const char* other_dir = std::getenv("EMBER_PRE_WORDS_DIR");
  if (other_dir) dir = other_dir;
  const std::string all = ember::test::read_bytes(dir / "pre_tokenizers.inp");
  static constexpr std::string_view kSeparator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0, next; (next = all.find(kSeparator, pos)) != std::string::npos; pos = next + kSeparator.size()) {
    texts.push_back(all.substr(pos, next - pos));
  }
  if (!other_dir) REQUIRE(texts.size() == 45);

  std::set<PreTokenizer> rules;
  size_t rules_passed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "pre_words")) {
    const std::string name = entry.path().stem().string();
    const auto spec = ember::tok::pre_tokenizer_spec(name);
    REQUIRE(spec);
    rules.insert(spec->rule);
    std::istringstream lines(ember::test::read_bytes(entry.path()));
    size_t same = 0;
    for (const std::string& text : texts) {
      std::string raw;
      REQUIRE(std::getline(lines, raw));
      // Empty words (superbpe's empty matches) give no ids; ember leaves them out.
      std::istringstream numbers(raw);
      std::string line;
      for (std::string n; numbers >> n;) {
        if (n == "0") continue;
        if (!line.empty()) line += ' ';
        line += n;
      }
      // Word lengths in bytes of the text as decoded (a bad byte is U+FFFD, 3 bytes).
      std::string lengths;
      for (const std::string& word : split(spec->rule, text)) {
        if (!lengths.empty()) lengths += ' ';
        lengths += std::to_string(word.size());
      }
      INFO(name << " text: '" << text << "'");
      CHECK(lengths == line);
      if (lengths == line) ++same;
    }
    std::printf("pre_words/%s (%s): %zu/%zu texts split as llama.cpp splits them\n", name.c_str(),
                std::string(ember::tok::pre_tokenizer_rule_name(spec->rule)).c_str(), same, texts.size());
    if (same == texts.size()) ++rules_passed;
  }
  CHECK(rules.size() == 17);
  CHECK(rules_passed == 17);
}

TEST_CASE("pre-tokenizer words: long runs of one kind of character, every rule", "[pre_tokenizer]") {
  // Each would be quadratic (or overflow the stack) on a plain backtracker for
  // some rule; here every rule finishes them in linear time. The words must
  // cover the text exactly, in order.
  const std::vector<std::string> runs = {
      std::string(50000, ' '),          std::string(50000, '\n'),  std::string(50000, '7'),
      std::string(50000, 'a'),          std::string(50000, '!'),   std::string(25000, ' ') + "x",
      std::string(25000, ' ') + "7",    std::string(25000, '\t') + "\n",
  };
  for (const std::string_view name : ember::tok::supported_pre_tokenizers()) {
    const auto rule = ember::tok::pre_tokenizer_spec(name)->rule;
    for (const std::string& text : runs) {
      std::string joined;
      for (const std::string& word : split(rule, text)) joined += word;
      CHECK(joined == text);
    }
  }
}
