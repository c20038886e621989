// Every bad-metadata path: the error code and a message naming the key.
#include <string>

#include "common/catch.hpp"
#include "ember/error.hpp"
#include "tok_test_util.hpp"
#include "tokenizer/tokenizer.hpp"

using ember::ErrorCode;
using ember::test::VocabBuilder;
using ember::tok::Tokenizer;
using ember::tok::TokenType;

namespace {

void expect_error(const ember::gguf::File& file, ErrorCode code, const std::string& fragment) {
  try {
    (void)Tokenizer::from_gguf(file);
    FAIL("from_gguf succeeded; expected " << ember::to_string(code) << " mentioning '" << fragment << "'");
  } catch (const ember::Error& e) {
    INFO("message: " << e.what());
    CHECK(e.code() == code);
    CHECK(std::string(e.what()).find(fragment) != std::string::npos);
  }
}

VocabBuilder small_spm() {
  VocabBuilder b;
  b.add("<unk>", 0, TokenType::unknown);
  b.add("<s>", 0, TokenType::control);
  b.add("</s>", 0, TokenType::control);
  b.add("a", -1);
  return b;
}

VocabBuilder small_bpe(const std::string& pre = "gpt-2") {
  VocabBuilder b;
  b.model = "gpt2";
  b.add("a");
  b.add("b");
  b.add("ab");
  if (!pre.empty()) b.extra.add_string("tokenizer.ggml.pre", pre);
  return b;
}

}  // namespace

TEST_CASE("vocab errors: unsupported tokenizer model and pre-tokenizer", "[vocab][errors]") {
  VocabBuilder bert = small_spm();
  bert.model = "bert";
  expect_error(bert.build(), ErrorCode::unsupported, "'bert'");

  VocabBuilder t5 = small_spm();
  t5.model = "t5";
  expect_error(t5.build(), ErrorCode::unsupported, "'t5'");

  VocabBuilder unknown = small_bpe("no-such-rule");
  unknown.extra.add_string_array("tokenizer.ggml.merges", {"a b"});
  expect_error(unknown.build(), ErrorCode::unsupported,
               "pre-tokenizer 'no-such-rule' (tokenizer.ggml.pre) is not supported");
}

TEST_CASE("vocab: a BPE vocabulary without tokenizer.ggml.pre gets the default rule and a warning", "[vocab]") {
  VocabBuilder no_pre = small_bpe("");
  no_pre.extra.add_string_array("tokenizer.ggml.merges", {"a b"});
  const ember::gguf::File file = no_pre.build();
  std::vector<std::pair<ember::LogLevel, std::string>> messages;
  const Tokenizer tok = Tokenizer::from_gguf(
      file, [&](ember::LogLevel level, std::string_view message) { messages.emplace_back(level, message); });
  CHECK(tok.pre_tokenizer() == ember::tok::PreTokenizer::default_bpe);
  REQUIRE(messages.size() == 1);
  CHECK(messages[0].first == ember::LogLevel::warning);
  CHECK(messages[0].second.find("without 'tokenizer.ggml.pre': using the default pre-tokenizer rule") !=
        std::string::npos);
  CHECK(tok.encode("ab", false, false) == std::vector<int32_t>{2});

  // No callback, or one that throws: the load still succeeds.
  CHECK(Tokenizer::from_gguf(file).pre_tokenizer() == ember::tok::PreTokenizer::default_bpe);
  const auto throwing = [](ember::LogLevel, std::string_view) { throw std::runtime_error("host log failed"); };
  CHECK(Tokenizer::from_gguf(file, throwing).pre_tokenizer() == ember::tok::PreTokenizer::default_bpe);

  // A named rule logs nothing.
  messages.clear();
  VocabBuilder named = small_bpe("deepseek-llm");
  named.extra.add_string_array("tokenizer.ggml.merges", {"a b"});
  const Tokenizer deepseek = Tokenizer::from_gguf(
      named.build(), [&](ember::LogLevel level, std::string_view message) { messages.emplace_back(level, message); });
  CHECK(deepseek.pre_tokenizer() == ember::tok::PreTokenizer::deepseek_llm);
  CHECK(messages.empty());
}

TEST_CASE("vocab errors: missing or mistyped arrays", "[vocab][errors]") {
  ember::gguf::Writer no_tokens;
  no_tokens.add_string("tokenizer.ggml.model", "llama");
  expect_error(ember::gguf::File::from_bytes(no_tokens.to_bytes()), ErrorCode::malformed_file,
               "tokenizer.ggml.tokens");

  ember::gguf::Writer no_model;
  no_model.add_string_array("tokenizer.ggml.tokens", {"a"});
  expect_error(ember::gguf::File::from_bytes(no_model.to_bytes()), ErrorCode::malformed_file,
               "tokenizer.ggml.model");

  ember::gguf::Writer int_tokens;
  int_tokens.add_string("tokenizer.ggml.model", "llama");
  int_tokens.add_int32_array("tokenizer.ggml.tokens", {1, 2, 3});
  expect_error(ember::gguf::File::from_bytes(int_tokens.to_bytes()), ErrorCode::malformed_file,
               "tokenizer.ggml.tokens");

  ember::gguf::Writer empty_tokens;
  empty_tokens.add_string("tokenizer.ggml.model", "llama");
  empty_tokens.add_string_array("tokenizer.ggml.tokens", {});
  expect_error(ember::gguf::File::from_bytes(empty_tokens.to_bytes()), ErrorCode::malformed_file,
               "tokenizer.ggml.tokens");
}

TEST_CASE("vocab errors: array lengths differ", "[vocab][errors]") {
  VocabBuilder scores = small_spm();
  scores.scores.pop_back();
  expect_error(scores.build(), ErrorCode::malformed_file, "tokenizer.ggml.scores");

  VocabBuilder types = small_spm();
  types.types.push_back(1);
  expect_error(types.build(), ErrorCode::malformed_file, "tokenizer.ggml.token_type");
}

TEST_CASE("vocab errors: bad token entries", "[vocab][errors]") {
  VocabBuilder duplicate = small_spm();
  duplicate.add("a");
  expect_error(duplicate.build(), ErrorCode::malformed_file, "tokens 3 and 4 are both 'a'");

  VocabBuilder type = small_spm();
  type.types[3] = 9;
  expect_error(type.build(), ErrorCode::malformed_file, "tokenizer.ggml.token_type");

  VocabBuilder byte = small_spm();
  byte.add("<0xZZ>", 0, TokenType::byte);
  expect_error(byte.build(), ErrorCode::malformed_file, "<0xZZ>");
}

TEST_CASE("vocab errors: special token ids out of range", "[vocab][errors]") {
  for (const std::string key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
                                "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    VocabBuilder b = small_spm();
    b.extra.add_uint32(key, 4);   // the vocabulary has ids 0..3
    expect_error(b.build(), ErrorCode::malformed_file, key);
  }
  VocabBuilder no_bos = small_bpe();
  no_bos.extra.add_string_array("tokenizer.ggml.merges", {"a b"});
  no_bos.extra.add_bool("tokenizer.ggml.add_bos_token", true);
  expect_error(no_bos.build(), ErrorCode::malformed_file, "add_bos_token");
}

TEST_CASE("vocab errors: merges", "[vocab][errors]") {
  expect_error(small_bpe().build(), ErrorCode::malformed_file, "tokenizer.ggml.merges");

  VocabBuilder unknown_part = small_bpe();
  unknown_part.extra.add_string_array("tokenizer.ggml.merges", {"a b", "a c"});
  expect_error(unknown_part.build(), ErrorCode::malformed_file, "merge 1 'a c' refers to 'c'");

  VocabBuilder unknown_result = small_bpe();
  unknown_result.extra.add_string_array("tokenizer.ggml.merges", {"b a"});
  expect_error(unknown_result.build(), ErrorCode::malformed_file, "refers to 'ba'");

  VocabBuilder no_space = small_bpe();
  no_space.extra.add_string_array("tokenizer.ggml.merges", {"ab"});
  expect_error(no_space.build(), ErrorCode::malformed_file, "tokenizer.ggml.merges");

  VocabBuilder ok = small_bpe();
  ok.extra.add_string_array("tokenizer.ggml.merges", {"a b"});
  const Tokenizer tok = Tokenizer::from_gguf(ok.build());
  CHECK(tok.encode("ab", true, true) == std::vector<int32_t>{2});
  CHECK(tok.encode("ba", true, true) == std::vector<int32_t>{1, 0});
  CHECK(tok.bos() == ember::tok::kNoToken);
  CHECK_FALSE(tok.adds_bos());
}
