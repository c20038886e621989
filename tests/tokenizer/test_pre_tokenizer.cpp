#include <string>
#include <vector>

#include "common/catch.hpp"
#include "tokenizer/pre_tokenizer.hpp"
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
  CHECK_FALSE(ember::tok::pre_tokenizer_spec("deepseek-llm"));
  CHECK_FALSE(ember::tok::pre_tokenizer_spec(""));
}
