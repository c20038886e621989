// Conformance: every vector of ../shared/tokenizer (llama.cpp's test-tokenizer-0
// data), of llama.cpp's own models/ggml-vocab-*.gguf files (when
// EMBER_LLAMA_CPP_MODELS points at them) and of tests/data/tokenizer (every
// pre-tokenizer name, made with llama.cpp; see the README there) must give
// exactly the same ids, and decoding must give back the text.
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "common/catch.hpp"
#include "common/paths.hpp"
#include "tok_test_util.hpp"
#include "tokenizer/bpe.hpp"
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

// ---------------------------------------------------------------------------
// Every tokenizer.ggml.pre name, on two vocabularies: the shared GPT-2 one
// (real merges; checks the flags such as taking whole-word tokens) and one in
// which every byte pair merges (its ids show every place the text was cut).

namespace {

// Names with vectors: every supported name, plus the vocabulary without the key.
std::vector<std::string> vector_names() {
  std::vector<std::string> names;
  for (const std::string_view name : ember::tok::supported_pre_tokenizers()) names.emplace_back(name);
  names.emplace_back("no-pre-key");
  return names;
}

ember::gguf::File with_pre_or_without(const ember::gguf::File& source, const std::string& pre) {
  if (pre != "no-pre-key") return ember::test::with_pre_tokenizer(source, pre);
  ember::gguf::Writer writer;
  for (const ember::gguf::KeyValue& kv : source.metadata()) {
    if (kv.key != "tokenizer.ggml.pre") writer.add(kv.key, kv.value);
  }
  return ember::gguf::File::from_bytes(writer.to_bytes(), source.name() + " without tokenizer.ggml.pre");
}

// The byte-pair vocabulary of make_pre_tokenizer_vectors.py (pair_vocab):
// tokens 0..255 are GPT-2's byte characters, token 256 + 256 a + b is the pair
// (a, b), merged with rank 256 a + b.
ember::gguf::File pair_vocab() {
  std::vector<std::string> chars(256);
  for (int b = 0; b < 256; ++b) {
    ember::tok::unicode::append_utf8(chars[b], ember::tok::byte_map::char_of_byte(static_cast<uint8_t>(b)));
  }
  std::vector<std::string> tokens = chars;
  std::vector<std::string> merges;
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      tokens.push_back(chars[a] + chars[b]);
      merges.push_back(chars[a] + " " + chars[b]);
    }
  }
  ember::gguf::Writer writer;
  writer.add_string("general.architecture", "gpt2");
  writer.add_string("tokenizer.ggml.model", "gpt2");
  writer.add_string_array("tokenizer.ggml.tokens", tokens);
  writer.add_int32_array("tokenizer.ggml.token_type", std::vector<int32_t>(tokens.size(), 1));
  writer.add_string_array("tokenizer.ggml.merges", merges);
  return ember::gguf::File::from_bytes(writer.to_bytes(), "byte-pair vocabulary");
}

// `every_name`: each name has its file; otherwise one name per rule suffices.
void check_every_name(const ember::gguf::File& source, const std::string& folder, bool every_name) {
  const auto dir = ember::test::data_dir() / "tokenizer";
  size_t names_passed = 0, names_checked = 0;
  std::set<ember::tok::PreTokenizer> rules;
  for (const std::string& name : vector_names()) {
    const auto out = dir / folder / (name + ".out");
    if (!every_name && !std::filesystem::exists(out)) continue;
    ++names_checked;
    const Tokenizer tok = Tokenizer::from_gguf(with_pre_or_without(source, name));
    rules.insert(tok.pre_tokenizer());
    const auto cases = ember::test::read_vectors(dir / "pre_tokenizers.inp", out);
    REQUIRE(cases.size() == 45);
    const Tally tally = check_vectors(tok, cases, false, folder + "/" + name);
    CHECK(tally.encoded == cases.size());
    CHECK(tally.decoded == tally.lossless);
    CHECK(tally.lossless == cases.size() - 1);   // one text holds invalid UTF-8 on purpose
    if (tally.encoded == cases.size() && tally.decoded == tally.lossless) ++names_passed;
  }
  std::printf("%s: %zu/%zu names (%zu rules) give llama.cpp's ids on every text\n", folder.c_str(), names_passed,
              names_checked, rules.size());
  CHECK(names_passed == names_checked);
  CHECK(rules.size() == 17);   // every rule but `none`
}

}  // namespace

TEST_CASE("every pre-tokenizer name: GPT-2 vocabulary, vectors made with llama.cpp", "[vectors][pre-names]") {
  check_every_name(ember::gguf::File::open(ember::test::tokenizer_dir() / "ggml-vocab-gpt-2.gguf"), "pre", true);
}

TEST_CASE("every pre-tokenizer name: byte-pair vocabulary, vectors made with llama.cpp", "[vectors][pre-pairs]") {
  check_every_name(pair_vocab(), "pre_pairs", false);
}

// ---------------------------------------------------------------------------
// llama.cpp's own conformance files (models/ggml-vocab-*.gguf with .inp/.out),
// read from $EMBER_LLAMA_CPP_MODELS (default: the EMBER_LLAMA_CPP_MODELS CMake
// cache path); never copied into this repository.

TEST_CASE("llama.cpp models/ vocabularies: all vectors", "[vectors][llama-cpp-models]") {
  std::filesystem::path dir = EMBER_LLAMA_CPP_MODELS;
  if (const char* env = std::getenv("EMBER_LLAMA_CPP_MODELS")) dir = env;
  if (dir.empty() || !std::filesystem::exists(dir / "ggml-vocab-gpt-2.gguf")) {
    std::printf("llama.cpp's models/ folder not found (set EMBER_LLAMA_CPP_MODELS to <llama.cpp>/models): skipped\n");
    std::exit(4);
  }
  // Every byte-level BPE and SentencePiece vocabulary of the folder that has
  // its .inp/.out (bert-bge is WordPiece, which ember does not implement).
  size_t files = 0, passed = 0;
  for (const char* name : {"deepseek-coder", "deepseek-llm", "falcon", "gpt-2", "llama-spm", "mpt", "phi-3", "refact",
                           "starcoder"}) {
    const auto base = dir / (std::string("ggml-vocab-") + name + ".gguf");
    if (!std::filesystem::exists(base)) {
      std::printf("%s: not in this llama.cpp checkout\n", base.filename().string().c_str());
      continue;
    }
    ++files;
    const auto file = ember::gguf::File::open(base);
    const Tokenizer tok = Tokenizer::from_gguf(file);
    const auto cases = ember::test::read_vectors(base.string() + ".inp", base.string() + ".out");
    const Tally tally = check_vectors(tok, cases, false, base.filename().string());
    CHECK(tally.encoded == cases.size());
    CHECK(tally.decoded == tally.lossless);
    if (tally.encoded == cases.size() && tally.decoded == tally.lossless) ++passed;
  }
  std::printf("llama.cpp models/: %zu/%zu vocabularies pass every vector\n", passed, files);
  CHECK(files > 0);
}

TEST_CASE("llama-bpe pre-tokenizer: vectors made with llama.cpp", "[vectors][llama-bpe]") {
  check_rule_vectors("llama-bpe", ember::tok::PreTokenizer::llama3);
}

TEST_CASE("qwen2 pre-tokenizer: vectors made with llama.cpp", "[vectors][qwen2]") {
  check_rule_vectors("qwen2", ember::tok::PreTokenizer::qwen2);
}
