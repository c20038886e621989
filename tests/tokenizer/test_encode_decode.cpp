// Encoding and decoding rules on a hand-made SentencePiece vocabulary (every
// id below is worked out by hand) and on the shared GPT-2 vocabulary.
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "common/catch.hpp"
#include "common/paths.hpp"
#include "ember/error.hpp"
#include "tok_test_util.hpp"
#include "tokenizer/tokenizer.hpp"

using ember::test::VocabBuilder;
using ember::tok::StreamDecoder;
using ember::tok::Tokenizer;
using ember::tok::TokenType;
using Ids = std::vector<int32_t>;

namespace {

constexpr int32_t kByteBase = 3;   // <0x00> is id 3
int32_t byte_id(uint8_t b) { return kByteBase + b; }

// ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 bytes, then the pieces below.
struct SmallSpmIds {
  int32_t space, a, b, c, ab, bc, space_a, space_ab, ctrl, end_of_turn, user, qr, rst;
};
struct SmallSpm : SmallSpmIds {
  Tokenizer tok;
};

SmallSpm small_spm() {
  VocabBuilder v;
  v.add("<unk>", 0, TokenType::unknown);
  v.add("<s>", 0, TokenType::control);
  v.add("</s>", 0, TokenType::control);
  v.add_byte_tokens();
  SmallSpmIds s{};
  s.space = v.add("\xE2\x96\x81", -10);
  s.a = v.add("a", -5);
  s.b = v.add("b", -5);
  s.c = v.add("c", -5);
  s.ab = v.add("ab", -3);
  s.bc = v.add("bc", -2);
  s.space_a = v.add("\xE2\x96\x81" "a", -1);
  s.space_ab = v.add("\xE2\x96\x81" "ab", -0.5f);
  s.ctrl = v.add("<ctrl>", 0, TokenType::control);
  s.end_of_turn = v.add("<end_of_turn>", 0, TokenType::user_defined);   // becomes control: a known end-of-turn text
  s.user = v.add("<u>", 0, TokenType::user_defined);
  s.qr = v.add("QR", 0, TokenType::user_defined);
  s.rst = v.add("RST", 0, TokenType::user_defined);
  return SmallSpm{s, Tokenizer::from_gguf(v.build())};
}

Tokenizer shared_gpt2() {
  return Tokenizer::from_gguf(ember::gguf::File::open(ember::test::tokenizer_dir() / "ggml-vocab-gpt-2.gguf"));
}

void expect_invalid_argument(const std::function<void()>& f) {
  try {
    f();
    FAIL("no error thrown");
  } catch (const ember::Error& e) {
    CHECK(e.code() == ember::ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("outside the vocabulary") != std::string::npos);
  }
}

}  // namespace

TEST_CASE("spm: merges by score, dummy prefix, byte fallback", "[spm]") {
  const SmallSpm s = small_spm();
  const Tokenizer& tok = s.tok;
  CHECK(tok.model() == ember::tok::TokenizerModel::spm);
  CHECK(tok.adds_bos());
  CHECK(tok.bos() == 1);
  CHECK(tok.eos() == 2);
  CHECK(tok.unk() == 0);

  // "▁abc": ▁a (-1) merges first, then ▁a+b = ▁ab (-0.5); "bc" is stale by then.
  CHECK(tok.encode("abc", false, false) == Ids{s.space_ab, s.c});
  CHECK(tok.encode("a", false, false) == Ids{s.space_a});
  CHECK(tok.encode("cab", false, false) == Ids{s.space, s.c, s.ab});
  CHECK(tok.encode("\xC3\xA9", false, false) == Ids{s.space, byte_id(0xC3), byte_id(0xA9)});
  CHECK(tok.encode("", false, false).empty());
  CHECK(tok.encode("", true, false) == Ids{1});
  CHECK(tok.encode("a", true, false) == Ids{1, s.space_a});
}

TEST_CASE("spm: special tokens", "[spm][special]") {
  const SmallSpm s = small_spm();
  const Tokenizer& tok = s.tok;
  // Control tokens only with parse_special; the text after one gets the prefix again.
  CHECK(tok.encode("a<ctrl>a", false, true) == Ids{s.space_a, s.ctrl, s.space_a});
  CHECK(tok.encode("a<ctrl>a", false, false) == Ids{s.space_a, byte_id('<'), s.c, byte_id('t'), byte_id('r'),
                                                     byte_id('l'), byte_id('>'), s.a});
  // User-defined tokens are matched either way.
  CHECK(tok.encode("a<u>b", false, false) == Ids{s.space_a, s.user, s.space, s.b});
  CHECK(tok.encode("<u><u>", false, false) == Ids{s.user, s.user});
  // Longest token first over the whole text: RST wins over the earlier QR.
  CHECK(tok.encode("QRST", false, false) == Ids{s.space, byte_id('Q'), s.rst});
  CHECK(tok.encode("QRQR", false, false) == Ids{s.qr, s.qr});
  // <end_of_turn> is treated as a control token (and ends generation).
  CHECK(tok.token_type(s.end_of_turn) == TokenType::control);
  CHECK(tok.encode("<end_of_turn>", false, true) == Ids{s.end_of_turn});
  CHECK(tok.encode("<end_of_turn>", false, false).size() > 1);
  CHECK(tok.eot() == s.end_of_turn);
  CHECK(tok.is_end_of_generation(s.end_of_turn));
  CHECK(tok.is_end_of_generation(2));
  CHECK_FALSE(tok.is_end_of_generation(s.ctrl));
  CHECK_FALSE(tok.is_end_of_generation(-1));
  CHECK(std::vector<int32_t>(tok.end_of_generation_ids().begin(), tok.end_of_generation_ids().end()) ==
        Ids{2, s.end_of_turn});
}

TEST_CASE("spm: decode", "[spm][decode]") {
  const SmallSpm s = small_spm();
  const Tokenizer& tok = s.tok;
  CHECK(tok.decode(Ids{s.space_a, s.space_ab}, false) == "a ab");   // one dummy space dropped
  CHECK(tok.decode(Ids{1, s.space_a}, false) == " a");              // only the first token loses it
  CHECK(tok.decode(Ids{s.ctrl, s.a}, false) == "a");
  CHECK(tok.decode(Ids{s.ctrl, s.a}, true) == "<ctrl>a");
  CHECK(tok.decode(Ids{s.user}, false) == "<u>");
  CHECK(tok.decode(tok.encode("a<u>b", false, false), false) == "a<u> b");
  CHECK(tok.decode(Ids{byte_id(0xE2), byte_id(0x82), byte_id(0xAC)}, false) == "\xE2\x82\xAC");
  CHECK(tok.decode(Ids{}, false).empty());
  CHECK(tok.token_piece(s.space_ab, false) == " ab");
  CHECK(tok.token_piece(byte_id('\n'), false) == "\n");
  CHECK(tok.token_text(s.space_ab) == "\xE2\x96\x81" "ab");
  CHECK(tok.token_score(s.space_ab) == -0.5f);
  CHECK(tok.find_token("ab") == s.ab);
  CHECK_FALSE(tok.find_token("zz"));
  CHECK_FALSE(tok.find_token(""));

  // Round trips of valid text come back exactly, except that SentencePiece
  // adds a space after a special token.
  for (const std::string text : {"abc", " a  b ", "QRST", "\xC3\xA9t\xC3\xA9\n\t"}) {
    CHECK(tok.decode(tok.encode(text, false, false), false) == text);
  }

  const int32_t n = tok.n_vocab();
  expect_invalid_argument([&] { (void)tok.decode(Ids{s.a, -1}, false); });
  expect_invalid_argument([&] { (void)tok.decode(Ids{n}, false); });
  expect_invalid_argument([&] { (void)tok.token_text(n); });
  expect_invalid_argument([&] { (void)tok.token_piece(-5, true); });
  expect_invalid_argument([&] { (void)tok.token_type(n + 100); });
  expect_invalid_argument([&] { (void)tok.token_score(-1); });
}

TEST_CASE("StreamDecoder holds back partial UTF-8", "[decode][stream]") {
  const SmallSpm s = small_spm();
  StreamDecoder stream(s.tok);
  CHECK(stream.push(s.space_a) == " a");
  CHECK(stream.push(byte_id(0xE2)).empty());
  CHECK(stream.pending_bytes() == 1);
  CHECK(stream.push(byte_id(0x82)).empty());
  CHECK(stream.push(byte_id(0xAC)) == "\xE2\x82\xAC");
  CHECK(stream.pending_bytes() == 0);
  CHECK(stream.push(s.ctrl).empty());   // control tokens are not rendered by default
  // A bad id throws and leaves what is held back untouched.
  CHECK(stream.push(byte_id(0xF0)).empty());
  try {
    (void)stream.push(-1);
    FAIL("no error thrown");
  } catch (const ember::Error& e) {
    CHECK(e.code() == ember::ErrorCode::invalid_argument);
  }
  CHECK(stream.pending_bytes() == 1);
  CHECK(stream.push(byte_id(0x9F)).empty());
  CHECK(stream.flush() == "\xF0\x9F");   // unfinished character handed out raw
  CHECK(stream.pending_bytes() == 0);
  CHECK(stream.flush().empty());
  // Invalid bytes are not held back forever.
  CHECK(stream.push(byte_id(0xFF)) == "\xFF");

  StreamDecoder with_special(s.tok, true);
  CHECK(with_special.push(s.ctrl) == "<ctrl>");
}

TEST_CASE("gpt-2: byte-level BPE basics", "[bpe]") {
  const Tokenizer tok = shared_gpt2();
  CHECK(tok.encode("Hello world", false, false) == Ids{15496, 995});
  CHECK(tok.encode("Hello world", true, false) == Ids{15496, 995});   // GPT-2 adds no BOS
  CHECK_FALSE(tok.adds_bos());
  CHECK(tok.bos() == 50256);
  CHECK(tok.eos() == 50256);
  CHECK(tok.eot() == 50256);   // <|endoftext|>
  CHECK(tok.is_end_of_generation(50256));
  CHECK_FALSE(tok.is_end_of_generation(995));
  CHECK(tok.token_text(995) == "\xC4\xA0world");   // "Ġworld"
  CHECK(tok.token_piece(995, false) == " world");
  CHECK(tok.find_token("Hello") == 15496);

  CHECK(tok.encode("<|endoftext|>", false, true) == Ids{50256});
  const Ids spelled = tok.encode("<|endoftext|>", false, false);
  CHECK(spelled.size() > 1);
  CHECK(tok.decode(spelled, false) == "<|endoftext|>");
  CHECK(tok.decode(Ids{50256}, false).empty());
  CHECK(tok.decode(Ids{50256}, true) == "<|endoftext|>");
  CHECK(tok.encode("a<|endoftext|>b", false, true) == Ids{64, 50256, 65});

  // Invalid UTF-8 is read as U+FFFD per bad byte (as llama.cpp does), so it
  // decodes to the replacement character.
  CHECK(tok.decode(tok.encode("x\xFFy", false, false), false) == "x\xEF\xBF\xBDy");

  // Copies share the vocabulary and give the same answers.
  const Tokenizer copy = tok;
  CHECK(copy.encode("Hello world", false, false) == Ids{15496, 995});
}

TEST_CASE("encode speed on 100 KB of text", "[speed]") {
  std::string text;
  const std::string paragraph =
      "The quick brown fox jumps over the lazy dog; it wasn't the first time. In 1867, 42 ferries "
      "(and 3.14159 kettles) sailed at 12:30 \xE2\x80\x94 caf\xC3\xA9 na\xC3\xAFve \xE4\xBB\x8A\xE5\xA4\xA9 "
      "\xF0\x9F\x98\x80!\n\n    def f(x):\n\treturn x * 2\n";
  while (text.size() < 100 * 1024) text += paragraph;

  for (const char* name : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"}) {
    const Tokenizer tok = Tokenizer::from_gguf(ember::gguf::File::open(ember::test::tokenizer_dir() / name));
    const auto start = std::chrono::steady_clock::now();
    const Ids ids = tok.encode(text, false, false);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s: encoded %zu bytes into %zu tokens in %.1f ms (%.1f MB/s)\n", name, text.size(), ids.size(),
                seconds * 1e3, text.size() / seconds / 1e6);
    CHECK(tok.decode(ids, false) == text);
    CHECK(seconds < 2.0);   // typically tens of milliseconds; generous for shared CI machines
  }
}
