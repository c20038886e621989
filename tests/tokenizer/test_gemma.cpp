// The tokenizer of the real model, Gemma 3 270M (SentencePiece-style, 262144
// pieces, no dummy prefix, user-defined whitespace runs). Ids checked against
// llama.cpp's llama-tokenize on the same file. Exits with 4 (ctest: skipped)
// when the model is not on this machine.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "common/catch.hpp"
#include "common/paths.hpp"
#include "gguf/gguf.hpp"
#include "tok_test_util.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

using ember::tok::Tokenizer;
using Ids = std::vector<int32_t>;

namespace {

struct Model {
  ember::gguf::File file;
  Tokenizer tok;
  double load_seconds;
};

const Model& gemma() {
  static std::optional<Model> model;
  if (!model) {
    const auto path = ember::test::real_model_path();
    if (!std::filesystem::exists(path)) {
      std::printf("real model not found at %s: skipped\n", path.string().c_str());
      std::exit(4);
    }
    auto file = ember::gguf::File::open(path);
    const auto start = std::chrono::steady_clock::now();
    Tokenizer tok = Tokenizer::from_gguf(file);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    model.emplace(Model{std::move(file), std::move(tok), seconds});
    std::printf("gemma tokenizer built from metadata in %.0f ms\n", seconds * 1e3);
  }
  return *model;
}

// From llama-tokenize -m gemma-3-270m-q4_k_m.gguf --ids --no-escape [--no-parse-special]:
// the Gemma chat format, with BOS.
const std::string kChatPrompt = "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n";
const Ids kChatIds = {2, 105, 2364, 107, 3689, 563, 236743, 236778, 236862, 236778, 236881, 106, 107, 105, 4368, 107};
const Ids kChatIdsSpelledOut = {2,      236820, 3041,   236779, 1340,   236779, 887,    236813, 2364,   107,    3689,
                                563,    236743, 236778, 236862, 236778, 145912, 643,    236779, 1340,   236779, 887,
                                236813, 107,    236820, 3041,   236779, 1340,   236779, 887,    236813, 4368,   107};

}  // namespace

TEST_CASE("gemma: vocabulary metadata", "[gemma]") {
  const Tokenizer& tok = gemma().tok;
  CHECK(tok.model() == ember::tok::TokenizerModel::spm);
  CHECK(tok.n_vocab() == 262144);
  CHECK(tok.bos() == 2);
  CHECK(tok.eos() == 1);
  CHECK(tok.unk() == 3);
  CHECK(tok.pad() == 0);
  CHECK(tok.adds_bos());
  CHECK_FALSE(tok.adds_eos());
  CHECK(tok.token_text(105) == "<start_of_turn>");
  CHECK(tok.eot() == 106);   // <end_of_turn>
  CHECK(tok.is_end_of_generation(106));
  CHECK(tok.is_end_of_generation(1));
  CHECK_FALSE(tok.is_end_of_generation(105));
  CHECK(tok.token_type(107) == ember::tok::TokenType::user_defined);   // "\n"
  CHECK(tok.find_token("<start_of_turn>") == 105);
}

TEST_CASE("gemma: chat prompt gives llama.cpp's ids", "[gemma]") {
  const Model& m = gemma();
  CHECK(m.tok.encode(kChatPrompt, true, true) == kChatIds);
  CHECK(m.tok.encode(kChatPrompt, true, false) == kChatIdsSpelledOut);
  CHECK(m.tok.decode(kChatIds, true) == "<bos>" + kChatPrompt);
  CHECK(m.tok.decode(kChatIds, false) == "user\nWhat is 2+2?\nmodel\n");

  // The built-in template (the file has no tokenizer.chat_template) renders the same text.
  const auto chat = ember::tok::ChatTemplate::from_gguf(m.file);
  CHECK(chat.format() == ember::tok::ChatFormat::gemma);
  const std::vector<ember::tok::ChatMessage> messages = {{"user", "What is 2+2?"}};
  CHECK(m.tok.encode(chat.render(messages, true), true, true) == kChatIds);
}

TEST_CASE("gemma: reference texts of tests/data/gemma3", "[gemma]") {
  const Tokenizer& tok = gemma().tok;
  const auto dir = ember::test::data_dir() / "gemma3";
  for (const bool parse_special : {false, true}) {
    const auto out = dir / (parse_special ? "tokenizer.special_on.out" : "tokenizer.special_off.out");
    const auto cases = ember::test::read_vectors(dir / "tokenizer.inp", out);
    REQUIRE(cases.size() == 48);
    size_t matched = 0;
    size_t round_trips = 0;
    for (const auto& c : cases) {
      const Ids ids = tok.encode(c.text, false, parse_special);
      INFO("text: '" << c.text << "'");
      CHECK(ember::test::format_ids(ids) == ember::test::format_ids(c.ids));
      matched += ids == c.ids;
      const std::string back = tok.decode(ids, true);
      CHECK(back == c.text);   // no dummy prefix and byte fallback: lossless
      round_trips += back == c.text;
    }
    std::printf("gemma3 reference (parse_special %s): %zu/%zu texts give llama.cpp's ids, %zu decode back\n",
                parse_special ? "on" : "off", matched, cases.size(), round_trips);
  }
}

TEST_CASE("gemma: encode speed on 100 KB", "[gemma][speed]") {
  const Tokenizer& tok = gemma().tok;
  const std::string paragraph =
      "<start_of_turn>user\nThe quick brown fox jumps over the lazy dog; it wasn't the first time. In 1867, 42 "
      "ferries sailed at 12:30 \xE2\x80\x94 caf\xC3\xA9 na\xC3\xAFve \xE4\xBB\x8A\xE5\xA4\xA9\xE5\xA4\xA9\xE6\xB0\x94 "
      "\xF0\x9F\x98\x80!<end_of_turn>\n\n    def f(x):\n\treturn x * 2\n        \n";
  std::string text;
  while (text.size() < 100 * 1024) text += paragraph;
  const auto start = std::chrono::steady_clock::now();
  const Ids ids = tok.encode(text, true, true);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("gemma: encoded %zu bytes into %zu tokens in %.1f ms (%.1f MB/s)\n", text.size(), ids.size(),
              seconds * 1e3, text.size() / seconds / 1e6);
  CHECK(tok.decode(ids, true) == "<bos>" + text);
  CHECK(seconds < 1.0);

  // Pathological input: one long run of a user-defined character.
  const std::string newlines(100 * 1024, '\n');
  const auto start2 = std::chrono::steady_clock::now();
  const Ids nl_ids = tok.encode(newlines, false, false);
  const double seconds2 = std::chrono::duration<double>(std::chrono::steady_clock::now() - start2).count();
  std::printf("gemma: 100 KB of newlines into %zu tokens in %.1f ms\n", nl_ids.size(), seconds2 * 1e3);
  CHECK(nl_ids.size() == (newlines.size() + 30) / 31);
  CHECK(seconds2 < 2.0);
}
