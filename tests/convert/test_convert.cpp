// Hugging Face checkpoint -> GGUF (include/ember/convert.hpp, lib/convert).
//
// The oracle is llama.cpp's convert_hf_to_gguf.py: tests/data/hf/expected holds its output
// for the checkpoints in tests/data/hf (README.md there says how it was made). Also: the
// JSON reader, the automatic output type, quantizing straight from a folder, bad input.
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "common/expect_error.hpp"
#include "common/json.hpp"
#include "common/paths.hpp"
#include "ember/convert.hpp"
#include "ember/model.hpp"
#include "ember/quantize.hpp"
#include "ember/session.hpp"
#include "gguf/gguf.hpp"

namespace fs = std::filesystem;
using ember::ErrorCode;
using ember::test::expect_error;

namespace {

fs::path hf_dir() { return ember::test::data_dir() / "hf"; }

// A fresh folder under the system's temporary directory, removed with its contents.
struct TempDir {
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ember-convert-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  fs::path path;
};

// A copy of a fixture folder that a test may change.
fs::path copy_fixture(const std::string& name, const TempDir& tmp) {
  const fs::path to = tmp.path / name;
  fs::copy(hf_dir() / name, to, fs::copy_options::recursive);
  return to;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A .safetensors file with one tensor of `dtype` and `n_bytes` zero bytes.
void write_safetensors(const fs::path& path, const std::string& name, const std::string& dtype,
                       const std::vector<int64_t>& shape, size_t n_bytes) {
  std::ostringstream h;
  h << "{\"" << name << "\":{\"dtype\":\"" << dtype << "\",\"shape\":[";
  for (size_t i = 0; i < shape.size(); ++i) h << (i ? "," : "") << shape[i];
  h << "],\"data_offsets\":[0," << n_bytes << "]}}";
  const std::string header = h.str();
  std::string file(8, '\0');
  uint64_t size = header.size();
  for (int i = 0; i < 8; ++i) file[size_t(i)] = char((size >> (8 * i)) & 0xFF);
  file += header;
  file += std::string(n_bytes, '\0');
  write_text(path, file);
}

// Every key but the two the converter derives from the folder name and parameter count,
// and every tensor's name, type, shape and bytes.
void require_same_gguf(const fs::path& expected_path, const fs::path& actual_path) {
  const auto expected = ember::gguf::File::open(expected_path);
  const auto actual = ember::gguf::File::open(actual_path);
  const std::set<std::string> ignored = {"general.name", "general.size_label"};
  std::map<std::string, const ember::gguf::Value*> want, got;
  for (const auto& kv : expected.metadata())
    if (!ignored.count(kv.key)) want[kv.key] = &kv.value;
  for (const auto& kv : actual.metadata())
    if (!ignored.count(kv.key)) got[kv.key] = &kv.value;
  for (const auto& [key, value] : want) {
    INFO("key " << key);
    REQUIRE(got.count(key) == 1);
    CHECK(*got[key] == *value);
  }
  for (const auto& [key, value] : got) {
    INFO("key " << key);
    CHECK(want.count(key) == 1);
  }
  REQUIRE(actual.tensors().size() == expected.tensors().size());
  for (const auto& t : expected.tensors()) {
    INFO("tensor " << t.name);
    const auto* a = actual.find_tensor(t.name);
    REQUIRE(a != nullptr);
    CHECK(a->type == t.type);
    CHECK(a->shape == t.shape);
    REQUIRE(a->n_bytes == t.n_bytes);
    CHECK(std::memcmp(a->data, t.data, t.n_bytes) == 0);
  }
}

}  // namespace

TEST_CASE("JSON: values, escapes, numbers and errors", "[convert][json]") {
  using ember::json::parse;
  const auto v = parse(R"( {"a": [1, -2, 3.5, 1e3, true, false, null], "s": "x\"\\\/\b\f\n\r\tq\u00e9\ud83d\ude00",
                          "a": {"nested": []}, "big": 12345678901234567890} )",
                       "test");
  REQUIRE(v.is_object());
  CHECK(v.find("a")->is_object());   // the last member of a name wins, as in Python
  CHECK(v.find("s")->as_string("s") == "x\"\\/\b\f\n\r\tq\xC3\xA9\xF0\x9F\x98\x80");
  CHECK(v.find("big")->kind() == ember::json::Value::Kind::number);   // beyond int64: a double
  const auto arr = parse("[1, -2, 3.5, 1e3, true, false, null]", "test").as_array("arr");
  REQUIRE(arr.size() == 7);
  CHECK(arr[0].as_int("0") == 1);
  CHECK(arr[1].as_int("1") == -2);
  CHECK(arr[2].as_double("2") == 3.5);
  CHECK(arr[3].as_double("3") == 1000.0);
  CHECK_FALSE(arr[3].is_integer());
  CHECK(arr[4].as_bool("4"));
  CHECK(arr[6].is_null());
  CHECK(parse("\"\xE2\x96\x81\"", "test").as_string("s") == "\xE2\x96\x81");
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "01", "1.", "-", "\"\\ud800\"", "\"\\udc00\"", "\"abc",
                          "\"\x01\"", "\"\xC0\xAF\"", "\"\xED\xA0\x80\"", "tru", "[1] 2", "\"\\x\""}) {
    INFO("input " << bad);
    expect_error([&] { parse(bad, "bad.json"); }, ErrorCode::malformed_file, "bad.json");
  }
  expect_error([&] { parse(std::string(600, '[') + std::string(600, ']'), "deep.json"); }, ErrorCode::malformed_file,
               "512 levels");
  expect_error([&] { (void)parse("[1]", "t").as_object("the root"); }, ErrorCode::malformed_file, "the root");
}

TEST_CASE("convert writes what llama.cpp's converter writes", "[convert]") {
  EMBER_SKIP_IF_MISSING(hf_dir() / "expected");
  struct Case {
    const char* fixture;
    ember::ConvertType type;
    const char* expected;
  };
  for (const Case c : {Case{"gemma3", ember::ConvertType::f32, "gemma3-f32.gguf"},
                       Case{"gemma3", ember::ConvertType::f16, "gemma3-f16.gguf"},
                       Case{"llama", ember::ConvertType::bf16, "llama-bf16.gguf"},
                       Case{"qwen2", ember::ConvertType::f16, "qwen2-f16.gguf"},
                       Case{"qwen3", ember::ConvertType::bf16, "qwen3-bf16.gguf"},
                       Case{"gemma2", ember::ConvertType::bf16, "gemma2-bf16.gguf"},
                       Case{"granite", ember::ConvertType::f16, "granite-f16.gguf"},
                       Case{"olmo2", ember::ConvertType::f32, "olmo2-f32.gguf"},
                       Case{"qwen3moe", ember::ConvertType::bf16, "qwen3moe-bf16.gguf"},
                       Case{"phi3", ember::ConvertType::f16, "phi3-f16.gguf"}}) {
    INFO(c.expected);
    TempDir tmp;
    const fs::path out = tmp.path / "out.gguf";
    int64_t calls = 0, last = 0, total = 0;
    ember::ConvertOptions options;
    options.type = c.type;
    options.progress = [&](const ember::ConvertProgress& p) {
      ++calls;
      CHECK(p.tensor == last + 1);
      last = p.tensor;
      total = p.tensors;
    };
    const ember::ConvertReport r = ember::convert_hf_checkpoint((hf_dir() / c.fixture).string(), out.string(), options);
    require_same_gguf(hf_dir() / "expected" / c.expected, out);
    CHECK(r.tensors == calls);
    CHECK(last == total);
    CHECK(r.file_bytes == fs::file_size(out));
    CHECK(r.type == c.type);
    // Only the output is left in the folder (the temporary was renamed).
    CHECK(std::distance(fs::directory_iterator(tmp.path), fs::directory_iterator()) == 1);
  }
}

TEST_CASE("convert: the automatic type, the report, and the result runs", "[convert]") {
  TempDir tmp;
  const ember::ConvertReport g = ember::convert_hf_checkpoint((hf_dir() / "gemma3").string(), (tmp.path / "g.gguf").string());
  CHECK(g.type == ember::ConvertType::bf16);   // every matrix BF16
  CHECK(g.architecture == "gemma3");
  CHECK(g.hf_architecture == "Gemma3ForCausalLM");
  CHECK(g.n_vocab == 423);
  CHECK(g.warnings.size() == 2);   // the two pieces tokenizer_config.json renames
  const ember::ConvertReport l = ember::convert_hf_checkpoint((hf_dir() / "llama").string(), (tmp.path / "l.gguf").string());
  CHECK(l.type == ember::ConvertType::f32);    // F16 and F32 matrices: the lossless F32
  CHECK(l.skipped == 2);                       // the rotary caches
  CHECK(l.tensors == 22);                      // 21 weights and rope_freqs
  CHECK(ember::is_hf_checkpoint((hf_dir() / "llama").string()));
  // Every converted architecture loads in ember and runs (the tiny models of each family).
  for (const char* fixture : {"llama", "qwen2", "qwen3", "gemma2", "granite", "olmo2", "qwen3moe", "phi3"}) {
    INFO(fixture);
    const fs::path out = tmp.path / (std::string(fixture) + ".gguf");
    ember::convert_hf_checkpoint((hf_dir() / fixture).string(), out.string());
    const auto m = ember::Model::load(out);
    auto s = m->new_session();
    const std::vector<int32_t> few = {1, 7, 42, 99};
    const std::vector<float> logits = s->evaluate(few);
    REQUIRE(!logits.empty());
    for (float x : logits) REQUIRE(std::isfinite(x));
  }
  CHECK_FALSE(ember::is_hf_checkpoint((tmp.path / "l.gguf").string()));

  // ember loads its conversion and runs it; the chat template and special tokens came through.
  const auto model = ember::Model::load(tmp.path / "g.gguf");
  const std::vector<int32_t> ids = model->tokenize("<start_of_turn>user\nThe cache", true, true);
  REQUIRE(ids.size() >= 3);
  CHECK(ids[0] == 2);   // <bos>
  CHECK(ids[1] == 5);   // <start_of_turn>, one control token
  auto session = model->new_session();
  const std::vector<float> logits = session->evaluate(ids);
  REQUIRE(logits.size() == ids.size() * 423);
  for (float x : logits) REQUIRE(std::isfinite(x));
}

TEST_CASE("a converted byte-level BPE vocabulary tokenizes as Hugging Face tokenizers does", "[convert]") {
  // tests/data/hf/qwen2/token_ids.json: the ids the tokenizers library gave when it made the
  // vocabulary (an oracle independent of llama.cpp and of ember).
  TempDir tmp;
  const fs::path out = tmp.path / "q.gguf";
  ember::convert_hf_checkpoint((hf_dir() / "qwen2").string(), out.string());
  const auto model = ember::Model::load(out);
  const ember::json::Value ids = ember::json::parse_file((hf_dir() / "qwen2" / "token_ids.json").string());
  REQUIRE(ids.as_object("token_ids").size() == 4);
  for (const auto& [text, expected] : ids.as_object("token_ids")) {
    INFO(text);
    std::vector<int32_t> want;
    for (const auto& id : expected.as_array("ids")) want.push_back(int32_t(id.as_int("id")));
    CHECK(model->tokenize(text) == want);
  }
  // Special and added tokens are whole tokens.
  const std::vector<int32_t> chat = model->tokenize("<|im_start|>user", false, true);
  REQUIRE(!chat.empty());
  CHECK(chat[0] == 1);
}

TEST_CASE("quantize reads a Hugging Face folder as it reads the converted GGUF", "[convert][quantize]") {
  EMBER_SKIP_IF_MISSING(hf_dir() / "expected");
  TempDir tmp;
  ember::QuantizeOptions options;
  options.recipe = ember::QuantRecipe::q8_0;
  const fs::path from_dir = tmp.path / "dir" / "q8.gguf", from_gguf = tmp.path / "gguf" / "q8.gguf";
  fs::create_directories(from_dir.parent_path());
  fs::create_directories(from_gguf.parent_path());
  const ember::QuantizeReport r = ember::quantize_model((hf_dir() / "gemma3").string(), from_dir.string(), options);
  ember::quantize_model((hf_dir() / "expected" / "gemma3-f32.gguf").string(), from_gguf.string(), options);
  CHECK(r.converted_from == (hf_dir() / "gemma3").string());
  require_same_gguf(from_gguf, from_dir);
  // The intermediate conversion is gone.
  CHECK(std::distance(fs::directory_iterator(from_dir.parent_path()), fs::directory_iterator()) == 1);
}

TEST_CASE("convert: bad input is a typed error and leaves no output", "[convert][errors]") {
  TempDir tmp;
  const std::string out = (tmp.path / "out.gguf").string();
  auto convert = [&](const fs::path& dir) { ember::convert_hf_checkpoint(dir.string(), out); };
  auto no_output = [&] { CHECK(std::distance(fs::directory_iterator(tmp.path), fs::directory_iterator()) == 0); };

  SECTION("not a checkpoint") {
    expect_error([&] { convert(tmp.path / "nothing"); }, ErrorCode::io, "not a directory");
    const fs::path empty = tmp.path / "empty";
    fs::create_directory(empty);
    expect_error([&] { convert(empty); }, ErrorCode::io, "no config.json");
    fs::remove(empty);
    no_output();
  }
  SECTION("an architecture ember does not convert") {
    TempDir src;
    const fs::path d = copy_fixture("gemma3", src);
    std::string cfg = read_text(d / "config.json");
    cfg.replace(cfg.find("Gemma3ForCausalLM"), std::strlen("Gemma3ForCausalLM"), "MambaForCausalLM");
    write_text(d / "config.json", cfg);
    expect_error([&] { convert(d); }, ErrorCode::unsupported, "MambaForCausalLM; ember converts LlamaForCausalLM");
    no_output();
  }
  SECTION("a config that is not JSON") {
    TempDir src;
    const fs::path d = copy_fixture("gemma3", src);
    write_text(d / "config.json", "{\"architectures\": [\"Gemma3ForCausalLM\"],");
    expect_error([&] { convert(d); }, ErrorCode::malformed_file, "invalid JSON");
    no_output();
  }
  SECTION("no tokenizer, or one ember does not convert") {
    TempDir src;
    const fs::path d = copy_fixture("llama", src);
    fs::remove(d / "tokenizer.model");
    // The fixture's tokenizer.json only lists added tokens: no pre-tokenizer to recognise.
    expect_error([&] { convert(d); }, ErrorCode::unsupported, "pre-tokenizer (none) is not one ember recognises");
    fs::remove(d / "tokenizer.json");
    expect_error([&] { convert(d); }, ErrorCode::unsupported, "neither tokenizer.model nor tokenizer.json");
    const fs::path g = copy_fixture("gemma3", src);
    fs::remove(g / "tokenizer.model");
    expect_error([&] { convert(g); }, ErrorCode::unsupported, "SentencePiece vocabularies only");
    const fs::path q = copy_fixture("qwen2", src);
    std::string tok = read_text(q / "tokenizer.json");
    const size_t at = tok.find("\\p{N}|");   // Qwen 2's single digits -> Llama 3's runs of three: recognised
    REQUIRE(at != std::string::npos);
    tok.replace(at, std::strlen("\\p{N}|"), "\\p{N}{1,3}|");
    write_text(q / "tokenizer.json", tok);
    ember::convert_hf_checkpoint(q.string(), out);
    CHECK(ember::gguf::File::open(out).get_string("tokenizer.ggml.pre") == "llama-bpe");
    fs::remove(out);
    tok.replace(at, std::strlen("\\p{N}{1,3}|"), "\\p{N}{1,2}|");   // an unknown split
    write_text(q / "tokenizer.json", tok);
    expect_error([&] { convert(q); }, ErrorCode::unsupported, "pre-tokenizer (Sequence) is not one ember recognises");
    no_output();
  }
  SECTION("a damaged tokenizer.model") {
    TempDir src;
    const fs::path d = copy_fixture("llama", src);
    const std::string spm = read_text(d / "tokenizer.model");
    write_text(d / "tokenizer.model", spm.substr(0, 1001));
    expect_error([&] { convert(d); }, ErrorCode::malformed_file, "not a SentencePiece model");
    no_output();
  }
  SECTION("a vocab_size below the tokenizer's") {
    TempDir src;
    const fs::path d = copy_fixture("llama", src);
    std::string cfg = read_text(d / "config.json");
    cfg.replace(cfg.find("\"vocab_size\": 420"), std::strlen("\"vocab_size\": 420"), "\"vocab_size\": 100");
    write_text(d / "config.json", cfg);
    expect_error([&] { convert(d); }, ErrorCode::malformed_file, "smaller than tokenizer.model's 420 pieces");
    no_output();
  }
  SECTION("a truncated safetensors file") {
    TempDir src;
    const fs::path d = copy_fixture("gemma3", src);
    const std::string st = read_text(d / "model.safetensors");
    write_text(d / "model.safetensors", st.substr(0, st.size() - 100));
    expect_error([&] { convert(d); }, ErrorCode::malformed_file, "data_offsets");
    write_text(d / "model.safetensors", st.substr(0, 4));
    expect_error([&] { convert(d); }, ErrorCode::malformed_file, "too short for a safetensors header");
    write_text(d / "model.safetensors", std::string("\xff\xff\xff\xff\0\0\0\0{}", 10));
    expect_error([&] { convert(d); }, ErrorCode::malformed_file, "runs past the end");
    no_output();
  }
  SECTION("mixture-of-experts tensors that do not fit the config") {
    TempDir src;
    const fs::path d = copy_fixture("qwen3moe", src);
    std::string cfg = read_text(d / "config.json");
    cfg.replace(cfg.find("\"num_experts\": 4"), std::strlen("\"num_experts\": 4"), "\"num_experts\": 3");
    write_text(d / "config.json", cfg);
    expect_error([&] { convert(d); }, ErrorCode::malformed_file, "does not fit num_experts 3");
    cfg.replace(cfg.find("\"num_experts\": 3"), std::strlen("\"num_experts\": 3"), "\"num_experts\": 5");
    write_text(d / "config.json", cfg);
    expect_error([&] { convert(d); }, ErrorCode::malformed_file, "expert matrices, not 3 x 5");
    no_output();
  }
  SECTION("a tensor without a GGUF name, and one of an integer type") {
    TempDir src;
    const fs::path d = copy_fixture("gemma3", src);
    write_safetensors(d / "extra.safetensors", "model.layers.0.mystery.weight", "F32", {4}, 16);
    expect_error([&] { convert(d); }, ErrorCode::unsupported, "'model.layers.0.mystery.weight'");
    write_safetensors(d / "extra.safetensors", "lm_head.weight", "I32", {423, 64}, 423 * 64 * 4);
    expect_error([&] { convert(d); }, ErrorCode::unsupported, "is I32");
    write_safetensors(d / "extra.safetensors", "lm_head.weight", "F32", {423, 64}, 100);
    expect_error([&] { convert(d); }, ErrorCode::malformed_file, "100 bytes for 27072 elements");
    no_output();
  }
  SECTION("an embedding shorter than the vocabulary") {
    TempDir src;
    const fs::path d = copy_fixture("gemma3", src);
    std::string cfg = read_text(d / "config.json");
    cfg.replace(cfg.find("\"vocab_size\": 423"), std::strlen("\"vocab_size\": 423"), "\"vocab_size\": 500");
    write_text(d / "config.json", cfg);
    expect_error([&] { convert(d); }, ErrorCode::malformed_file, "423 rows for a vocabulary of 500");
    no_output();
  }
  SECTION("sizes no real model has, and null members") {
    TempDir src;
    const fs::path d = copy_fixture("gemma3", src);
    std::string cfg = read_text(d / "config.json");
    cfg.replace(cfg.find("\"vocab_size\": 423"), std::strlen("\"vocab_size\": 423"), "\"vocab_size\": 4000000000");
    write_text(d / "config.json", cfg);
    expect_error([&] { convert(d); }, ErrorCode::malformed_file, "vocab_size 4000000000 is outside 1 .. 16777216");
    const fs::path m = copy_fixture("qwen3moe", src);
    cfg = read_text(m / "config.json");
    cfg.replace(cfg.find("\"num_experts\": 4"), std::strlen("\"num_experts\": 4"), "\"num_experts\": 0");
    write_text(m / "config.json", cfg);
    expect_error([&] { convert(m); }, ErrorCode::malformed_file, "num_experts 0 is outside");
    const fs::path p = copy_fixture("phi3", src);
    cfg = read_text(p / "config.json");
    cfg.replace(cfg.find("\"rms_norm_eps\""), 0, "\"partial_rotary_factor\": 2.5, ");
    write_text(p / "config.json", cfg);
    expect_error([&] { convert(p); }, ErrorCode::malformed_file, "partial_rotary_factor 2.5 is outside (0, 1]");
    const fs::path h = copy_fixture("llama", src);
    cfg = read_text(h / "config.json");
    cfg.replace(cfg.find("\"num_attention_heads\": 4"), std::strlen("\"num_attention_heads\": 4"),
                "\"num_attention_heads\": 0");
    write_text(h / "config.json", cfg);
    expect_error([&] { convert(h); }, ErrorCode::malformed_file, "head counts must be positive");
    no_output();
    // A null member is absent: the config class's default applies (Gemma 3's rms_norm_eps 1e-6).
    TempDir src2;
    const fs::path g = copy_fixture("gemma3", src2);
    cfg = read_text(g / "config.json");
    cfg.replace(cfg.find("\"rms_norm_eps\": 1e-06"), std::strlen("\"rms_norm_eps\": 1e-06"), "\"rms_norm_eps\": null");
    write_text(g / "config.json", cfg);
    ember::convert_hf_checkpoint(g.string(), out);
    CHECK(ember::gguf::File::open(out).get_float("gemma3.attention.layer_norm_rms_epsilon") == double(1e-6f));
    fs::remove(out);
  }
  SECTION("an output that cannot be written") {
    expect_error([&] { ember::convert_hf_checkpoint((hf_dir() / "gemma3").string(), (tmp.path / "no/such/x.gguf").string()); },
                 ErrorCode::io, "cannot create a file");
    no_output();
  }
}
