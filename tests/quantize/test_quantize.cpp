// ember::quantize_model against llama-quantize as an independent oracle: per-tensor
// types and FNV-1a digests of the tensor data that llama-quantize wrote from the same
// F16 input (tests/data/quant/llama-quantize/README.md says how they were made).
#include <sys/resource.h>

#include <csignal>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "common/expect_error.hpp"
#include "common/paths.hpp"
#include "ember/model.hpp"
#include "ember/quantize.hpp"
#include "ember/session.hpp"
#include "gguf/gguf.hpp"
#include "quant/quant.hpp"
#include "quantize/type_rules.hpp"
#include "quantize/weight_quantizers.hpp"

namespace fs = std::filesystem;
using ember::ErrorCode;
using ember::QuantRecipe;
using ember::test::expect_error;

namespace {

struct Digest {
  std::string name, type;
  std::string fnv;   // 16 hex digits
};

std::string fnv1a64(const std::byte* data, uint64_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t i = 0; i < n; ++i) h = (h ^ uint64_t(data[i])) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::vector<Digest> digests_of(const fs::path& gguf_path) {
  const ember::gguf::File file = ember::gguf::File::open(gguf_path);
  std::vector<Digest> out;
  for (const ember::gguf::TensorInfo& t : file.tensors())
    out.push_back({t.name, std::string(ember::quant::type_name(t.type)), fnv1a64(t.data, t.n_bytes)});
  return out;
}

// The same digest over a whole file, read in 1 MiB pieces (the real model's F16 file is 518 MiB).
std::string fnv1a64_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::vector<char> piece(size_t(1) << 20);
  uint64_t h = 0xcbf29ce484222325ull;
  while (in) {
    in.read(piece.data(), std::streamsize(piece.size()));
    for (std::streamsize i = 0; i < in.gcount(); ++i) h = (h ^ uint64_t(static_cast<unsigned char>(piece[size_t(i)]))) * 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

fs::path recorded_dir() { return ember::test::data_dir() / "quant" / "llama-quantize"; }

// Lines "NAME TYPE FNV BYTES" as written by the digest script of the README.
std::vector<Digest> recorded(const std::string& name) {
  std::ifstream in(recorded_dir() / (name + ".txt"));
  REQUIRE(in.good());
  std::vector<Digest> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    Digest d;
    uint64_t bytes = 0;
    if (fields >> d.name >> d.type >> d.fnv >> bytes) out.push_back(d);
  }
  REQUIRE(!out.empty());
  return out;
}

// A fresh, empty folder under the system temp directory.
fs::path scratch(const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("ember_test_quantize_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

size_t files_in(const fs::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

// The FNV-1a digest of the whole file llama-quantize wrote (files.txt: "NAME FNV BYTES").
std::string recorded_file_digest(const std::string& name) {
  std::ifstream in(recorded_dir() / "files.txt");
  REQUIRE(in.good());
  std::string n, fnv;
  uint64_t bytes = 0;
  while (in >> n >> fnv >> bytes)
    if (n == name) return fnv;
  FAIL("no digest of " << name << " in files.txt");
  return "";
}

fs::path llama_f16() { return ember::test::golden_dir() / "llama-F16.gguf"; }

ember::QuantizeReport quantize(const fs::path& in, const fs::path& out, QuantRecipe recipe, bool pure = false,
                               int threads = 1) {
  ember::QuantizeOptions options;
  options.recipe = recipe;
  options.pure = pure;
  options.threads = threads;
  return ember::quantize_model(in.string(), out.string(), options);
}

struct Case {
  const char* recorded;   // file name under tests/data/quant/llama-quantize
  QuantRecipe recipe;
  bool pure;
};

constexpr Case kCases[] = {
    {"llama-pure-Q8_0", QuantRecipe::q8_0, true}, {"llama-pure-Q4_0", QuantRecipe::q4_0, true},
    {"llama-pure-Q4_1", QuantRecipe::q4_1, true}, {"llama-pure-Q5_0", QuantRecipe::q5_0, true},
    {"llama-pure-Q5_1", QuantRecipe::q5_1, true}, {"llama-Q8_0", QuantRecipe::q8_0, false},
    {"llama-Q4_0", QuantRecipe::q4_0, false},     {"llama-Q4_1", QuantRecipe::q4_1, false},
    {"llama-Q5_0", QuantRecipe::q5_0, false},     {"llama-Q5_1", QuantRecipe::q5_1, false},
    {"llama-Q4_K_M", QuantRecipe::q4_k_m, false}, {"llama-Q5_K_M", QuantRecipe::q5_k_m, false},
    {"llama-Q6_K", QuantRecipe::q6_k, false},
};

// The logits of a fixed 16-token input through `path`'s model (one thread).
std::vector<float> logits_of(const fs::path& path) {
  static const std::vector<int32_t> kTokens = {1, 17, 250, 31, 400, 5, 77, 128, 9, 300, 44, 2, 61, 199, 86, 3};
  const auto model = ember::Model::load(path.string(), {.threads = 1});
  return model->new_session()->evaluate(kTokens);
}

// ||got - want|| / ||want||.
double rms_error(const std::vector<float>& got, const std::vector<float>& want) {
  double e2 = 0, s2 = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    e2 += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    s2 += double(want[i]) * want[i];
  }
  return std::sqrt(e2 / s2);
}

}  // namespace

TEST_CASE("quantized tensors are byte-identical to llama-quantize's", "[quantize]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("identity");
  for (const Case& c : kCases) {
    INFO(c.recorded);
    const fs::path out = dir / (std::string(c.recorded) + ".gguf");
    // Two threads: the rows are split between them, which must not change a byte.
    const ember::QuantizeReport report = quantize(llama_f16(), out, c.recipe, c.pure, 2);
    const std::vector<Digest> expected = recorded(c.recorded), got = digests_of(out);
    REQUIRE(got.size() == expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO(expected[i].name);
      CHECK(got[i].name == expected[i].name);   // llama-quantize's order
      CHECK(got[i].type == expected[i].type);
      CHECK(got[i].fnv == expected[i].fnv);
    }
    CHECK(report.tensors.size() == got.size());
    CHECK(report.file_bytes == fs::file_size(out));
    // Metadata too (same keys, values, order, general.file_type): the whole file is identical.
    CHECK(fnv1a64_file(out) == recorded_file_digest(c.recorded));
  }
  fs::remove_all(dir);
}

TEST_CASE("a BF16 source gives llama-quantize's file too", "[quantize]") {
  const fs::path in = ember::test::golden_dir() / "llama-BF16.gguf";
  EMBER_SKIP_IF_MISSING(in);
  const fs::path dir = scratch("bf16");
  for (auto [recipe, name] : {std::pair{QuantRecipe::q4_k_m, "llama-bf16-Q4_K_M"}, std::pair{QuantRecipe::q5_1, "llama-bf16-Q5_1"}}) {
    INFO(name);
    quantize(in, dir / "out.gguf", recipe);
    CHECK(fnv1a64_file(dir / "out.gguf") == recorded_file_digest(name));
  }
  fs::remove_all(dir);
}

TEST_CASE("F16 from a quantized file is llama-quantize's F16 file", "[quantize]") {
  // llama-quantize --allow-requantize IN OUT F16: every block type ember reads dequantized
  // and rounded to F16, the F32 norms copied, general.file_type 1.
  const fs::path dir = scratch("f16");
  for (const char* name : {"llama-Q8_0", "llama-Q4_0", "llama-Q4_1", "llama-Q5_0", "llama-Q5_1", "llama-Q4_K_M",
                           "llama-Q5_K_M", "llama-Q6_K", "llama-BF16", "gemma3-Q4_K_M", "gemma3-Q8_0", "qwen2-Q8_0"}) {
    INFO(name);
    const fs::path in = ember::test::golden_dir() / (std::string(name) + ".gguf");
    EMBER_SKIP_IF_MISSING(in);
    const ember::QuantizeReport report = quantize(in, dir / "out.gguf", QuantRecipe::f16, false, 2);
    CHECK(fnv1a64_file(dir / "out.gguf") == recorded_file_digest(std::string(name) + "-F16"));
    CHECK(report.file_type == 1);
    // A quantized source says that its weights come back only as they were stored.
    CHECK(report.warnings.empty() == (std::string(name) == "llama-BF16"));
  }
  // A conversion quantizes nothing: the calibrated methods and budgets are refused.
  ember::QuantizeOptions options;
  options.recipe = QuantRecipe::f16;
  options.budget_bytes = 1 << 20;
  expect_error([&] { ember::quantize_model(llama_f16().string(), (dir / "no.gguf").string(), options); },
               ErrorCode::invalid_argument, "quantizes nothing");
  CHECK(!fs::exists(dir / "no.gguf"));
  CHECK(ember::parse_quant_recipe("f16") == QuantRecipe::f16);
  CHECK(std::string(ember::to_string(QuantRecipe::f16)) == "F16");
  fs::remove_all(dir);
}

TEST_CASE("Gemma 3 270M: the whole file is llama-quantize's, for every recipe", "[quantize][.][real_model]") {
  // The source of docs/quantization.md: the real model's Q4_K_M file dequantized to F16.
  // ember makes it here, and it must be llama-quantize's F16 file byte for byte before
  // each recipe is compared with llama-quantize's file from that source.
  const fs::path model = ember::test::real_model_path();
  if (!fs::exists(model)) {
    WARN("the real model is not at " << model << "; skipped (scripts/fetch-model.sh)");
    return;
  }
  const fs::path dir = scratch("gemma");
  const fs::path in = dir / "gemma-3-270m-F16.gguf";
  quantize(model, in, QuantRecipe::f16, false, 2);
  REQUIRE(fnv1a64_file(in) == recorded_file_digest("gemma-F16"));
  for (const Case& c : kCases) {
    if (c.pure) continue;   // llama-quantize --pure cannot write Gemma (rows of 640)
    std::string name = std::string(c.recorded).replace(0, 5, "gemma");
    INFO(name);
    const fs::path out = dir / (name + ".gguf");
    quantize(in, out, c.recipe, false, 2);
    CHECK(fnv1a64_file(out) == recorded_file_digest(name));
    fs::remove(out);
  }
  fs::remove_all(dir);
}

TEST_CASE("Q4_K_M and Q5_K_M choose llama-quantize's type for every tensor", "[quantize]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const ember::gguf::File in = ember::gguf::File::open(llama_f16());
  std::vector<ember::quantize::TensorShape> shapes;
  for (size_t i = 0; i < in.tensors().size(); ++i)
    shapes.push_back({in.tensors()[i].name, in.tensors()[i].type, in.tensors()[i].shape, i});
  const ember::quantize::ModelFacts facts{.arch = "llama", .n_layer = 4, .n_expert = 0, .n_head = 8, .n_head_kv = 2};
  for (auto [recipe, file] : {std::pair{ember::quantize::Recipe::q4_k_m, "llama-Q4_K_M"},
                              std::pair{ember::quantize::Recipe::q5_k_m, "llama-Q5_K_M"}}) {
    INFO(file);
    const auto plans = ember::quantize::plan_types(shapes, facts, recipe, false);
    const std::vector<Digest> expected = recorded(file);
    REQUIRE(plans.size() == expected.size());
    size_t wider = 0;
    for (size_t i = 0; i < plans.size(); ++i) {
      CHECK(shapes[plans[i].index].name == expected[i].name);
      CHECK(ember::quant::type_name(plans[i].type) == expected[i].type);
      wider += expected[i].type == "Q6_K";
    }
    CHECK(wider >= 4);   // output + attn_v and ffn_down of layers 2 and 3: the mixture is exercised
  }
}

TEST_CASE("a tied token embedding follows the output rule; rows not a multiple of 256 fall back", "[quantize]") {
  using ember::quant::DType;
  using ember::quantize::Recipe;
  // Gemma-like: no output.weight, n_embd 640 (not a multiple of 256) or 512.
  for (int64_t n_embd : {640, 512}) {
    const std::vector<ember::quantize::TensorShape> shapes = {
        {"token_embd.weight", DType::f16, {n_embd, 1000}, 0},
        {"blk.0.attn_q.weight", DType::f16, {n_embd, 1024}, 1},
        {"blk.0.attn_output.weight", DType::f16, {1024, n_embd}, 2},
        {"blk.0.attn_norm.weight", DType::f32, {n_embd}, 3},
        {"blk.0.ffn_down.weight", DType::f16, {2048, n_embd}, 4},
    };
    const ember::quantize::ModelFacts facts{.arch = "gemma3", .n_layer = 1, .n_head = 4, .n_head_kv = 1};
    auto type_of = [&](const std::vector<ember::quantize::TensorPlan>& plans, const std::string& name) {
      for (const auto& p : plans)
        if (shapes[p.index].name == name) return p.type;
      FAIL("no plan for " << name);
      return DType::f32;
    };
    const auto q4km = ember::quantize::plan_types(shapes, facts, Recipe::q4_k_m, false);
    const auto q40 = ember::quantize::plan_types(shapes, facts, Recipe::q4_0, false);
    const auto q40_pure = ember::quantize::plan_types(shapes, facts, Recipe::q4_0, true);
    INFO("n_embd " << n_embd);
    CHECK(type_of(q4km, "token_embd.weight") == (n_embd % 256 ? DType::q8_0 : DType::q6_k));
    CHECK(type_of(q40, "token_embd.weight") == (n_embd % 256 ? DType::q8_0 : DType::q6_k));
    CHECK(type_of(q40_pure, "token_embd.weight") == DType::q4_0);
    CHECK(type_of(q4km, "blk.0.attn_q.weight") == (n_embd % 256 ? DType::q5_0 : DType::q4_k));
    CHECK(type_of(q4km, "blk.0.attn_output.weight") == DType::q4_k);
    CHECK(type_of(q4km, "blk.0.ffn_down.weight") == DType::q6_k);   // layer 0 of 1: use_more_bits
    CHECK(type_of(q4km, "blk.0.attn_norm.weight") == DType::f32);
    // The visiting order: outside-layer tensors first, then by name within a layer.
    CHECK(shapes[q4km[0].index].name == "token_embd.weight");
    CHECK(shapes[q4km[1].index].name == "blk.0.attn_norm.weight");
  }
}

TEST_CASE("the searched K quantizers are more accurate than lib/quant's nearest rounding", "[quantize]") {
  using ember::quant::DType;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(256 * 64), back(x.size());
  for (float& v : x) v = normal(rng) * (1.0f + 0.2f * normal(rng));
  auto error = [&](DType type, bool searched) {
    std::vector<std::byte> q(ember::quant::row_bytes(type, int64_t(x.size())));
    if (searched)
      ember::quantize::quantize_values(type, x.data(), q.data(), int64_t(x.size()));
    else
      ember::quant::quantize_row(type, x.data(), q.data(), int64_t(x.size()));
    ember::quant::dequantize_row(type, q.data(), back.data(), int64_t(x.size()));
    double e = 0;
    for (size_t i = 0; i < x.size(); ++i) e += double(x[i] - back[i]) * double(x[i] - back[i]);
    return e;
  };
  for (DType type : {DType::q4_k, DType::q5_k, DType::q6_k}) {
    INFO(ember::quant::type_name(type));
    CHECK(error(type, true) < 0.97 * error(type, false));
  }
}

TEST_CASE("Q4_G128 and Q4_G64 files load and run close to the source", "[quantize]") {
  // ember's own INT4 groups, round to nearest: every projection in the group type (the
  // golden model's rows of 256 and 768 values hold whole groups), the tied embedding
  // in Q6_K; the model's logits stay near the F16 source's, as Q4_0's do.
  using ember::quant::DType;
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("groups");
  const std::vector<float> source = logits_of(llama_f16());
  REQUIRE(source.size() == 16 * 512);
  quantize(llama_f16(), dir / "q4_0.gguf", QuantRecipe::q4_0);
  const double q4_0_error = rms_error(logits_of(dir / "q4_0.gguf"), source);
  for (const auto& [recipe, type] : {std::pair{QuantRecipe::q4_g128, DType::q4_g128}, std::pair{QuantRecipe::q4_g64, DType::q4_g64}}) {
    INFO(ember::to_string(recipe));
    const fs::path out = dir / (std::string(ember::to_string(recipe)) + ".gguf");
    const ember::QuantizeReport report = quantize(llama_f16(), out, recipe);
    CHECK(report.file_type == (type == DType::q4_g128 ? 1100u : 1101u));
    REQUIRE(report.warnings.size() == 1);
    CHECK_THAT(report.warnings[0], Catch::Matchers::Contains("only ember loads this file"));
    const ember::gguf::File file = ember::gguf::File::open(out);
    int64_t grouped = 0;
    for (const ember::gguf::TensorInfo& t : file.tensors()) {
      INFO(t.name);
      if (t.name.find("blk.") == 0 && t.shape.size() == 2) {
        CHECK(t.type == type);
        ++grouped;
      }
    }
    CHECK(grouped == 4 * 7);
    const double error = rms_error(logits_of(out), source);
    INFO("relative rms logit error " << error << ", Q4_0's " << q4_0_error);
    CHECK(error > 0.0);
    CHECK(error < 1.5 * q4_0_error);
  }
  fs::remove_all(dir);
}

TEST_CASE("Q8_W (W8A8) files load and run as close to the source as Q8_0", "[quantize]") {
  // INT8 weights with one scale per row, activations quantized per token: every
  // projection in Q8_W; the logits within a small factor of Q8_0's (per-block scales
  // on both sides) distance to the F16 source.
  using ember::quant::DType;
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("w8a8");
  const std::vector<float> source = logits_of(llama_f16());
  quantize(llama_f16(), dir / "q8_0.gguf", QuantRecipe::q8_0);
  const double q8_0_error = rms_error(logits_of(dir / "q8_0.gguf"), source);
  const ember::QuantizeReport report = quantize(llama_f16(), dir / "q8_w.gguf", QuantRecipe::q8_w);
  CHECK(report.file_type == 1102u);
  const ember::gguf::File file = ember::gguf::File::open(dir / "q8_w.gguf");
  int64_t w8 = 0;
  for (const ember::gguf::TensorInfo& t : file.tensors()) w8 += t.name.find("blk.") == 0 && t.type == DType::q8_w;
  CHECK(w8 == 4 * 7);
  const double error = rms_error(logits_of(dir / "q8_w.gguf"), source);
  INFO("relative rms logit error " << error << ", Q8_0's " << q8_0_error);
  CHECK(error > 0.0);
  CHECK(error < 3.0 * q8_0_error);

  // Q8_WR: the same on rotated weights and activations; its tensors decode to the
  // original basis, so the file runs as close to the source.
  const ember::QuantizeReport rotated = quantize(llama_f16(), dir / "q8_wr.gguf", QuantRecipe::q8_wr);
  CHECK(rotated.file_type == 1104u);
  int64_t wr = 0;
  const ember::gguf::File rotated_file = ember::gguf::File::open(dir / "q8_wr.gguf");
  for (const ember::gguf::TensorInfo& t : rotated_file.tensors())
    wr += t.name.find("blk.") == 0 && t.type == DType::q8_wr;
  CHECK(wr == 4 * 7);
  const double error_wr = rms_error(logits_of(dir / "q8_wr.gguf"), source);
  INFO("Q8_WR: relative rms logit error " << error_wr);
  CHECK(error_wr > 0.0);
  CHECK(error_wr < 3.0 * q8_0_error);
  // GPTQ has no grid for it (its columns would have to run in the rotated basis).
  ember::QuantizeOptions gptq;
  gptq.recipe = QuantRecipe::q8_wr;
  gptq.method = ember::QuantMethod::gptq;
  gptq.calibration_text = "unused";
  expect_error([&] { ember::quantize_model(llama_f16().string(), (dir / "gptq.gguf").string(), gptq); },
               ErrorCode::unsupported, "not Q8_WR");
  CHECK_FALSE(fs::exists(dir / "gptq.gguf"));
  fs::remove_all(dir);
}

TEST_CASE("the report, metadata and progress of a quantized file", "[quantize]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("report");
  const fs::path out = dir / "out.gguf";
  ember::QuantizeOptions options;
  options.recipe = QuantRecipe::q4_k_m;
  size_t calls = 0;
  options.on_tensor = [&](const ember::QuantizeProgress& p) {
    CHECK(p.index == calls);
    CHECK(p.tensor != nullptr);
    ++calls;
  };
  const ember::QuantizeReport report = ember::quantize_model(llama_f16().string(), out.string(), options);
  CHECK(calls == report.tensors.size());
  CHECK(report.file_type == 15);
  CHECK(report.warnings.empty());
  CHECK(report.bytes_out < report.bytes_in / 3);
  CHECK(report.relative_error > 0.01);
  CHECK(report.relative_error < 0.1);
  for (const ember::QuantizedTensor& t : report.tensors) {
    INFO(t.name);
    if (t.quantized) {
      CHECK(t.relative_error > 0.0);
      CHECK(t.relative_error < (t.type_out == "Q6_K" ? 0.03 : 0.12));
    } else {
      CHECK(t.type_out == t.type_in);
      CHECK(t.relative_error == 0.0);
    }
  }
  const ember::gguf::File file = ember::gguf::File::open(out);
  CHECK(file.get_uint("general.file_type") == 15);
  CHECK(file.get_uint("general.quantization_version") == 2);
  CHECK(file.get_string("general.architecture") == "llama");
  CHECK(file.get_array("tokenizer.ggml.tokens").items.size() == 512);
  CHECK(files_in(dir) == 1);   // no temporary left beside it
  fs::remove_all(dir);
}

TEST_CASE("quantizing an already quantized file warns", "[quantize]") {
  const fs::path in = ember::test::golden_dir() / "gemma3-Q8_0.gguf";
  EMBER_SKIP_IF_MISSING(in);
  const fs::path dir = scratch("requant");
  const ember::QuantizeReport report = quantize(in, dir / "out.gguf", QuantRecipe::q4_0);
  REQUIRE(report.warnings.size() == 1);
  CHECK_THAT(report.warnings[0], Catch::Matchers::Contains("already quantized"));
  const ember::gguf::File out = ember::gguf::File::open(dir / "out.gguf");
  // Gemma's tied token embedding (n_embd 320, not a multiple of 256): Q6_K falls back to Q8_0.
  CHECK(out.tensor("token_embd.weight").type == ember::quant::DType::q8_0);
  CHECK(out.tensor("blk.0.attn_q.weight").type == ember::quant::DType::q4_0);
  fs::remove_all(dir);
}

TEST_CASE("bad input is a typed error and leaves no output", "[quantize]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("errors");
  const fs::path out = dir / "out.gguf";
  std::ifstream src(llama_f16(), std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(src)), std::istreambuf_iterator<char>());

  SECTION("an unknown type name") {
    CHECK_FALSE(ember::parse_quant_recipe("Q3_K").has_value());
    CHECK_FALSE(ember::parse_quant_recipe("").has_value());
    REQUIRE(ember::parse_quant_recipe("q4_k_m").has_value());
    CHECK(*ember::parse_quant_recipe("q4_k_m") == QuantRecipe::q4_k_m);
    CHECK(std::string(ember::to_string(QuantRecipe::q5_1)) == "Q5_1");
  }
  SECTION("a truncated input") {
    const fs::path in = dir / "truncated.gguf";
    std::ofstream(in, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() / 2));
    expect_error([&] { quantize(in, out, QuantRecipe::q4_0); }, ErrorCode::malformed_file, "truncated.gguf");
  }
  SECTION("a file that is not GGUF") {
    const fs::path in = dir / "text.gguf";
    std::ofstream(in) << "this is not a model, just text that is long enough to be read as a header\n";
    expect_error([&] { quantize(in, out, QuantRecipe::q8_0); }, ErrorCode::malformed_file, "not a GGUF file");
  }
  SECTION("an input that does not exist") {
    expect_error([&] { quantize(dir / "missing.gguf", out, QuantRecipe::q8_0); }, ErrorCode::io, "missing.gguf");
  }
  SECTION("an output folder that does not exist") {
    const fs::path bad = dir / "no" / "such" / "folder" / "out.gguf";
    expect_error([&] { quantize(llama_f16(), bad, QuantRecipe::q8_0); }, ErrorCode::io, "cannot create a file in");
    CHECK_FALSE(fs::exists(bad));
  }
  SECTION("an output path that is a folder") {
    fs::create_directories(dir / "a_folder");
    expect_error([&] { quantize(llama_f16(), dir / "a_folder", QuantRecipe::q8_0); }, ErrorCode::io, "cannot rename");
    CHECK(fs::is_directory(dir / "a_folder"));
  }
  SECTION("a disk that fills up (RLIMIT_FSIZE below the file size)") {
    rlimit old{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);   // a write past the limit then fails with EFBIG
    rlimit small = old;
    small.rlim_cur = 100000;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    try {
      quantize(llama_f16(), out, QuantRecipe::q8_0);
      FAIL("no error with a full disk");
    } catch (const ember::Error& e) {
      CHECK(e.code() == ErrorCode::io);
      CHECK_THAT(e.what(), Catch::Matchers::Contains("cannot write"));
    }
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
  }
  SECTION("an architecture ember does not support") {
    ember::gguf::Writer w;
    w.add_string("general.architecture", "mamba");
    w.add_uint32("mamba.block_count", 1);
    std::vector<uint16_t> zeros(64 * 2, 0);
    w.add_tensor("blk.0.ssm_in.weight", ember::quant::DType::f16, {64, 2}, std::as_bytes(std::span(zeros)));
    w.write(dir / "mamba.gguf");
    expect_error([&] { quantize(dir / "mamba.gguf", out, QuantRecipe::q8_0); }, ErrorCode::unsupported,
                 "architecture 'mamba'");
  }
  SECTION("one part of a split model") {
    ember::gguf::Writer w;
    w.add_string("general.architecture", "llama");
    w.add_uint32("llama.block_count", 1);
    w.add("split.no", ember::gguf::Value::make_uint(ember::gguf::ValueType::u16, 0));
    w.add("split.count", ember::gguf::Value::make_uint(ember::gguf::ValueType::u16, 3));
    w.write(dir / "split.gguf");
    expect_error([&] { quantize(dir / "split.gguf", out, QuantRecipe::q8_0); }, ErrorCode::unsupported,
                 "part 1 of a model split into 3 files");
  }
  SECTION("rows that no type of the recipe can hold") {
    ember::gguf::Writer w;
    w.add_string("general.architecture", "llama");
    w.add_uint32("llama.block_count", 1);
    std::vector<float> values(48 * 4, 0.5f);
    w.add_tensor("blk.0.attn_q.weight", ember::quant::DType::f32, {48, 4}, std::as_bytes(std::span(values)));
    w.write(dir / "odd.gguf");
    expect_error([&] { quantize(dir / "odd.gguf", out, QuantRecipe::q4_0); }, ErrorCode::unsupported,
                 "'blk.0.attn_q.weight' has rows of 48 values");
  }
  SECTION("a weight that is not finite") {
    ember::gguf::Writer w;
    w.add_string("general.architecture", "llama");
    w.add_uint32("llama.block_count", 1);
    std::vector<float> values(64 * 4, 0.5f);
    values[70] = std::nanf("");
    w.add_tensor("blk.0.attn_q.weight", ember::quant::DType::f32, {64, 4}, std::as_bytes(std::span(values)));
    w.write(dir / "nan.gguf");
    expect_error([&] { quantize(dir / "nan.gguf", out, QuantRecipe::q8_0, false, 2); }, ErrorCode::malformed_file,
                 "'blk.0.attn_q.weight' holds a non-finite value");
  }
  SECTION("zero threads") {
    expect_error([&] { quantize(llama_f16(), out, QuantRecipe::q8_0, false, 0); }, ErrorCode::invalid_argument,
                 "threads is 0");
  }
  // Whatever failed, neither the output nor a temporary is left in the output's folder.
  CHECK_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
  fs::remove_all(dir);
}
