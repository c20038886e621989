// Conformance: every vector of ../shared/tokenizer (llama.cpp's test-tokenizer-0
// data) and of tests/data/tokenizer (Llama-3 and Qwen2 pre-tokenizer rules,
// made with llama.cpp; see the README there) must give exactly the same ids,
// and decoding must give back the text.
#include <cstdio>
#include <string>

#include "common/catch.hpp"
#include "common/paths.hpp"
#include "tok_test_util.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode.hpp"

using ember::test::VectorCase;
using ember::tok::Tokenizer;

namespace {

struct Tally {
  size_t encoded = 0;
  size_t decoded = 0;
  size_t lossless = 0;
};

// Checks every case; prints and returns the counts.
Tally check_vectors(const Tokenizer& tok, const std::vector<VectorCase>& cases, bool parse_special,
                    const std::string& label) {
  Tally tally;
  for (const VectorCase& c : cases) {
    const std::vector<int32_t> ids = tok.encode(c.text, false, parse_special);
    INFO(label << " text: '" << c.text << "'");
    CHECK(ember::test::format_ids(ids) == ember::test::format_ids(c.ids));
    if (ids == c.ids) ++tally.encoded;

    // Byte-level BPE and SentencePiece with byte fallback both keep every
    // byte of valid UTF-8 text; special tokens decode to their text when rendered.
    if (ember::test::is_valid_utf8(c.text)) {
      ++tally.lossless;
      const std::string back = tok.decode(ids, /*render_special=*/true);
      CHECK(back == c.text);
      if (back == c.text) ++tally.decoded;
    }

    // Streaming gives the same bytes, only ever cut after whole characters.
    ember::tok::StreamDecoder stream(tok, true);
    std::string streamed;
    for (const int32_t id : ids) {
      const std::string part = stream.push(id);
      CHECK(ember::tok::unicode::incomplete_suffix_length(part) == 0);
      streamed += part;
    }
    streamed += stream.flush();
    std::string whole;
    for (const int32_t id : ids) whole += tok.token_piece(id, true);
    CHECK(streamed == whole);
  }
  std::printf("%s: %zu/%zu vectors give llama.cpp's ids; %zu/%zu valid UTF-8 texts decode back exactly\n",
              label.c_str(), tally.encoded, cases.size(), tally.decoded, tally.lossless);
  return tally;
}

std::vector<VectorCase> shared_vectors(const std::string& vocab) {
  const auto dir = ember::test::tokenizer_dir();
  return ember::test::read_vectors(dir / (vocab + ".gguf.inp"), dir / (vocab + ".gguf.out"));
}

void check_rule_vectors(const std::string& pre, ember::tok::PreTokenizer expected_rule) {
  const auto gpt2 = ember::gguf::File::open(ember::test::tokenizer_dir() / "ggml-vocab-gpt-2.gguf");
  const auto file = ember::test::with_pre_tokenizer(gpt2, pre);
  const Tokenizer tok = Tokenizer::from_gguf(file);
  REQUIRE(tok.pre_tokenizer() == expected_rule);

  const auto dir = ember::test::data_dir() / "tokenizer";
  for (const bool parse_special : {false, true}) {
    const std::string suffix = parse_special ? "special_on" : "special_off";
    const auto cases = ember::test::read_vectors(dir / "bpe_rules.inp", dir / (pre + "." + suffix + ".out"));
    REQUIRE(cases.size() == 34);
    const Tally tally = check_vectors(tok, cases, parse_special, pre + " (" + suffix + ")");
    CHECK(tally.encoded == cases.size());
    CHECK(tally.decoded == tally.lossless);
    CHECK(tally.lossless == cases.size() - 1);   // one text holds invalid UTF-8 on purpose
  }
}

}  // namespace

TEST_CASE("llama-spm vocabulary: all llama.cpp vectors", "[vectors][llama-spm]") {
  const auto file = ember::gguf::File::open(ember::test::tokenizer_dir() / "ggml-vocab-llama-spm.gguf");
  const Tokenizer tok = Tokenizer::from_gguf(file);
  CHECK(tok.model() == ember::tok::TokenizerModel::spm);
  CHECK(tok.n_vocab() == 32000);
  const auto cases = shared_vectors("ggml-vocab-llama-spm");
  REQUIRE(cases.size() == 46);
  const Tally tally = check_vectors(tok, cases, false, "ggml-vocab-llama-spm");
  CHECK(tally.encoded == cases.size());
  CHECK(tally.decoded == tally.lossless);
  CHECK(tally.lossless == cases.size());
}

TEST_CASE("gpt-2 vocabulary: all llama.cpp vectors", "[vectors][gpt-2]") {
  const auto file = ember::gguf::File::open(ember::test::tokenizer_dir() / "ggml-vocab-gpt-2.gguf");
  const Tokenizer tok = Tokenizer::from_gguf(file);
  CHECK(tok.model() == ember::tok::TokenizerModel::bpe);
  CHECK(tok.pre_tokenizer() == ember::tok::PreTokenizer::gpt2);
  CHECK(tok.n_vocab() == 50257);
  const auto cases = shared_vectors("ggml-vocab-gpt-2");
  REQUIRE(cases.size() == 46);
  const Tally tally = check_vectors(tok, cases, false, "ggml-vocab-gpt-2");
  CHECK(tally.encoded == cases.size());
  CHECK(tally.decoded == tally.lossless);
  CHECK(tally.lossless == cases.size());
}

TEST_CASE("llama-bpe pre-tokenizer: vectors made with llama.cpp", "[vectors][llama-bpe]") {
  check_rule_vectors("llama-bpe", ember::tok::PreTokenizer::llama3);
}

TEST_CASE("qwen2 pre-tokenizer: vectors made with llama.cpp", "[vectors][qwen2]") {
  check_rule_vectors("qwen2", ember::tok::PreTokenizer::qwen2);
}
