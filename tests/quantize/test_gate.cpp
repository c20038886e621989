// The perplexity gate (quantize_model max_ppl_rise, lib/quantize/gate.hpp) and measured
// sensitivity (Sensitivity::kl, lib/quantize/sensitivity.hpp): the raising rule, the
// gate raising tensors until the rise holds, failing without an output when it cannot,
// the held-out calibration tail, and a deliberately fragile tensor ranked first by KL.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "common/expect_error.hpp"
#include "common/paths.hpp"
#include "ember/model.hpp"
#include "ember/perplexity.hpp"
#include "ember/quantize.hpp"
#include "ember/session.hpp"
#include "gguf/gguf.hpp"
#include "quant/quant.hpp"
#include "quantize/gate.hpp"
#include "quantize/weight_quantizers.hpp"

namespace fs = std::filesystem;
using ember::ErrorCode;
using ember::quant::DType;
using ember::test::expect_error;
namespace q = ember::quantize;

namespace {

fs::path llama_f16() { return ember::test::golden_dir() / "llama-F16.gguf"; }

fs::path scratch(const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("ember_test_gate_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_text(const fs::path& path, int paragraphs) {
  std::ofstream out(path);
  for (int i = 0; i < paragraphs; ++i)
    out << "Section " << i << ". The harbour master logged " << i * 11 % 17 << " ships before noon, and the "
        << "weather station reported a light westerly wind with scattered showers over the northern hills.\n";
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

ember::ModelOptions two_threads() {
  ember::ModelOptions options;
  options.threads = 2;
  return options;
}

ember::QuantizeOptions q4_0_with_eval(const fs::path& eval) {
  ember::QuantizeOptions options;
  options.recipe = ember::QuantRecipe::q4_0;
  options.threads = 2;
  options.eval_text = eval.string();
  options.eval_ctx = 64;
  return options;
}

std::map<std::string, DType> types_of(const fs::path& path) {
  const auto file = ember::gguf::File::open(path);
  std::map<std::string, DType> types;
  for (const auto& t : file.tensors()) types[std::string(t.name)] = t.type;
  return types;
}

void check_no_temporary(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
}

// `source` with outliers in blk.1.attn_output without changing the model's function:
// row d0 of each KV head's block of blk.1.attn_v is divided by k, so every attention
// output channel h * head_dim + d0 is; column h * head_dim + d0 of attn_output, one per
// 32-value block of each row, is multiplied by k. Round-to-nearest Q4_0 then spends each
// block's scale on its outlier and rounds the other 31 weights to about zero.
void write_outliers(const fs::path& source, const fs::path& out, float k) {
  const auto file = ember::gguf::File::open(source);
  const int64_t head_dim = 32, n_head_kv = 2, d0 = 0;   // the golden llama model (golden/README.md)
  ember::gguf::Writer writer(file.alignment());
  for (const auto& kv : file.metadata())
    if (kv.key != "general.alignment") writer.add(kv.key, kv.value);
  for (const auto& t : file.tensors()) {
    const bool v = t.name == "blk.1.attn_v.weight", o = t.name == "blk.1.attn_output.weight";
    if (!v && !o) {
      writer.add_tensor(std::string(t.name), t.type, t.shape, std::span(t.data, t.n_bytes));
      continue;
    }
    REQUIRE(t.type == DType::f16);
    const int64_t cols = t.cols(), rows = t.rows();
    std::vector<float> w(size_t(t.n_elements));
    ember::quant::dequantize_row(t.type, t.data, w.data(), int64_t(t.n_elements));
    if (v) {
      REQUIRE(rows == n_head_kv * head_dim);
      for (int64_t h = 0; h < n_head_kv; ++h)
        for (int64_t c = 0; c < cols; ++c) w[size_t((h * head_dim + d0) * cols + c)] /= k;
    } else {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = d0; c < cols; c += head_dim) w[size_t(r * cols + c)] *= k;
    }
    std::vector<std::byte> bytes(t.n_bytes);
    q::quantize_values(DType::f16, w.data(), bytes.data(), int64_t(t.n_elements));
    writer.add_tensor(std::string(t.name), t.type, t.shape, bytes);
  }
  writer.write(out);
}

}  // namespace

TEST_CASE("the gate's next wider type and its round order", "[quantize][gate]") {
  CHECK(q::wider_type(DType::q4_0, DType::f16, 256) == DType::q8_0);
  CHECK(q::wider_type(DType::q5_1, DType::f32, 256) == DType::q8_0);
  CHECK(q::wider_type(DType::q4_k, DType::f16, 256) == DType::q6_k);
  CHECK(q::wider_type(DType::q5_k, DType::f16, 512) == DType::q6_k);
  CHECK(q::wider_type(DType::q6_k, DType::f16, 256) == DType::q8_0);
  CHECK(q::wider_type(DType::q8_0, DType::f16, 256) == DType::f16);
  CHECK(q::wider_type(DType::q8_w, DType::f16, 256) == DType::q8_0);
  CHECK(q::wider_type(DType::q8_wr, DType::f16, 256) == DType::q8_0);
  CHECK(q::wider_type(DType::q8_0, DType::f32, 256) == DType::f16);
  CHECK(q::wider_type(DType::q8_0, DType::bf16, 256) == DType::bf16);
  CHECK_FALSE(q::wider_type(DType::f16, DType::f32, 256).has_value());
  CHECK_FALSE(q::wider_type(DType::bf16, DType::bf16, 256).has_value());
  CHECK_FALSE(q::wider_type(DType::q8_0, DType::q8_0, 256).has_value());   // already the source's type

  // Down the ranking, `step` at a time, then again from the top; tensors that cannot be
  // raised are passed over.
  q::RaiseOrder order({7, 3, 9, 4});
  std::vector<size_t> blocked = {9};
  const auto can = [&](size_t k) { return std::find(blocked.begin(), blocked.end(), k) == blocked.end(); };
  CHECK(order.next(2, can) == std::vector<size_t>{7, 3});
  CHECK(order.next(2, can) == std::vector<size_t>{4, 7});
  CHECK(order.next(5, can) == std::vector<size_t>{3, 4, 7});   // each at most once per round
  blocked = {7, 3, 9, 4};
  CHECK(order.next(2, can).empty());
}

TEST_CASE("the gate raises the most sensitive tensors until the perplexity rise holds", "[quantize][gate]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("raise");
  write_text(dir / "eval.txt", 40);
  const fs::path plain = dir / "plain.gguf", out = dir / "out.gguf";

  ember::QuantizeOptions options = q4_0_with_eval(dir / "eval.txt");
  const ember::QuantizeReport first = ember::quantize_model(llama_f16().string(), plain.string(), options);
  CHECK(first.gate_rounds.empty());   // max_ppl_rise 0: no gate, the figures only
  const double rise = first.ppl_after / first.ppl_before - 1.0;
  INFO("ungated Q4_0: perplexity " << first.ppl_before << " -> " << first.ppl_after);
  REQUIRE(rise > 0.02);

  options.max_ppl_rise = rise / 4;
  options.gate_step = 3;
  int rounds_seen = 0;
  options.on_gate = [&](const ember::GateRound& r) { CHECK(r.round == ++rounds_seen); };
  const ember::QuantizeReport gated = ember::quantize_model(llama_f16().string(), out.string(), options);
  REQUIRE_FALSE(gated.rejected);
  REQUIRE(fs::exists(out));
  check_no_temporary(dir);
  CHECK(gated.ppl_first == first.ppl_after);   // the same first file, then the rounds
  REQUIRE_FALSE(gated.gate_rounds.empty());
  CHECK(rounds_seen == int(gated.gate_rounds.size()));
  CHECK(gated.ppl_after <= gated.ppl_before * (1.0 + options.max_ppl_rise));
  CHECK(gated.gate_rounds.back().perplexity == gated.ppl_after);
  for (size_t i = 0; i + 1 < gated.gate_rounds.size(); ++i)   // every earlier round still exceeded the limit
    CHECK(gated.gate_rounds[i].rise > options.max_ppl_rise);

  // The file's own perplexity, measured apart, is the reported one.
  {
    ember::PerplexityOptions popts;
    popts.ctx = 64;
    std::string text = read_text(dir / "eval.txt");
    text.pop_back();
    const auto model = ember::Model::load(out.string(), two_threads());
    CHECK(ember::perplexity(*model, text, popts).perplexity == Approx(gated.ppl_after).epsilon(1e-12));
  }

  // The raised tensors are wider in the file, as reported; every other tensor is as in the
  // ungated file.
  const auto plain_types = types_of(plain), gated_types = types_of(out);
  std::map<std::string, std::string> raised;   // name -> last "to"
  for (const ember::GateRound& r : gated.gate_rounds) {
    CHECK(r.raised.size() <= size_t(options.gate_step));
    CHECK_FALSE(r.raised.empty());
    for (const ember::RaisedTensor& t : r.raised) {
      INFO(t.name << " " << t.from << " -> " << t.to);
      CHECK(((t.from == "Q4_0" && t.to == "Q8_0") || (t.from == "Q6_K" && t.to == "Q8_0") ||
             (t.from == "Q8_0" && t.to == "F16")));
      raised[t.name] = t.to;
    }
  }
  size_t changed = 0;
  for (const ember::QuantizedTensor& t : gated.tensors) {
    INFO(t.name);
    const DType in_file = gated_types.at(t.name);
    CHECK(ember::quant::type_name(in_file) == t.type_out);
    if (const auto it = raised.find(t.name); it != raised.end()) {
      CHECK(t.type_out == it->second);
      CHECK(t.raised_from == std::string(ember::quant::type_name(plain_types.at(t.name))));
      CHECK(in_file != plain_types.at(t.name));
      ++changed;
    } else {
      CHECK(t.raised_from.empty());
      CHECK(in_file == plain_types.at(t.name));
    }
  }
  CHECK(changed == raised.size());
  CHECK(gated.bytes_out > first.bytes_out);
  fs::remove_all(dir);
}

TEST_CASE("a gate that cannot be met leaves no output and gives the figures", "[quantize][gate]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("fail");
  write_text(dir / "eval.txt", 40);
  const fs::path out = dir / "out.gguf";

  // One round of one tensor cannot bring a Q4_0 rise of several percent under 0.0001 %.
  ember::QuantizeOptions options = q4_0_with_eval(dir / "eval.txt");
  options.max_ppl_rise = 1e-6;
  options.gate_step = 1;
  options.gate_max_rounds = 1;
  const ember::QuantizeReport r = ember::quantize_model(llama_f16().string(), out.string(), options);
  INFO("perplexity " << r.ppl_before << " -> " << r.ppl_first << " -> " << r.ppl_after);
  REQUIRE(r.ppl_first > r.ppl_before * 1.02);
  CHECK(r.rejected);
  CHECK_FALSE(fs::exists(out));
  check_no_temporary(dir);
  REQUIRE(r.gate_rounds.size() == 1);
  CHECK(r.gate_rounds[0].raised.size() == 1);
  CHECK(r.ppl_after == r.gate_rounds[0].perplexity);
  CHECK(r.ppl_after > r.ppl_before * (1.0 + options.max_ppl_rise));

  // Without the round limit every tensor can go up to F16, which for an F16 source is the
  // source itself: the gate always holds in the end. With everything raised at once, two
  // rounds (Q4_0/Q6_K -> Q8_0 -> F16) at most.
  options.gate_max_rounds = 0;
  options.gate_step = 1000;
  const ember::QuantizeReport all = ember::quantize_model(llama_f16().string(), out.string(), options);
  CHECK_FALSE(all.rejected);
  CHECK(fs::exists(out));
  REQUIRE(all.gate_rounds.size() <= 2);
  CHECK(all.ppl_after <= all.ppl_before * (1.0 + options.max_ppl_rise));
  if (all.gate_rounds.size() == 2) {
    CHECK(all.ppl_after == Approx(all.ppl_before).epsilon(1e-12));
    for (const ember::QuantizedTensor& t : all.tensors)
      if (t.quantized) CHECK(t.type_out == "F16");
  }
  fs::remove_all(dir);
}

TEST_CASE("without --eval the gate evaluates on the calibration text's held-out tail", "[quantize][gate]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("held");
  write_text(dir / "calib.txt", 60);
  const fs::path out = dir / "out.gguf";
  const auto model = ember::Model::load(llama_f16().string(), two_threads());
  const std::vector<int32_t> text_tokens = model->tokenize(read_text(dir / "calib.txt"), false, false);
  const auto n = int64_t(text_tokens.size());

  ember::QuantizeOptions options;
  options.recipe = ember::QuantRecipe::q4_0;
  options.threads = 2;
  options.calibration_text = (dir / "calib.txt").string();
  options.samples = 1000;   // as many as the calibrated part holds
  options.sample_tokens = 64;
  options.target_bpw = 6.0;   // a mixture, so that calibration runs
  options.eval_ctx = 64;
  options.max_ppl_rise = 100.0;   // holds at once: this case is about what is evaluated
  const ember::QuantizeReport r = ember::quantize_model(llama_f16().string(), out.string(), options);
  const int64_t held = std::max<int64_t>(int64_t(std::ceil(double(n) * 0.10)), 64);
  CHECK(r.held_out_tokens == held);
  CHECK(r.gate_rounds.empty());
  // Calibration read only the first n - held tokens: 63 text tokens per 64-token sample.
  CHECK(r.calibration_samples == (n - held) / 63);
  // The input's perplexity is that of BOS + the tail.
  std::vector<int32_t> tail = {model->bos_token()};
  tail.insert(tail.end(), text_tokens.end() - held, text_tokens.end());
  ember::PerplexityOptions popts;
  popts.ctx = 64;
  CHECK(r.ppl_before == Approx(ember::perplexity(*model, tail, popts).perplexity).epsilon(1e-12));
  CHECK(fs::exists(out));

  // Too short to hold out one chunk and keep anything for calibration.
  write_text(dir / "short.txt", 2);
  options.calibration_text = (dir / "short.txt").string();
  options.eval_ctx = 512;
  fs::remove(out);
  expect_error([&] { ember::quantize_model(llama_f16().string(), out.string(), options); }, ErrorCode::invalid_argument,
               "too few to hold out");
  CHECK_FALSE(fs::exists(out));
  // Neither an evaluation nor a calibration text: no gate possible.
  options.calibration_text.clear();
  options.target_bpw = 0;
  expect_error([&] { ember::quantize_model(llama_f16().string(), out.string(), options); }, ErrorCode::invalid_argument,
               "--max-ppl-rise needs an evaluation text");
  options.max_ppl_rise = 0.05;
  options.eval_text = (dir / "calib.txt").string();
  options.gate_step = -1;
  expect_error([&] { ember::quantize_model(llama_f16().string(), out.string(), options); }, ErrorCode::invalid_argument,
               "gate_step is -1");
  options.gate_step = 0;
  options.gate_max_rounds = -2;
  expect_error([&] { ember::quantize_model(llama_f16().string(), out.string(), options); }, ErrorCode::invalid_argument,
               "gate_max_rounds is -2");
  options.gate_max_rounds = 0;
  options.hold_out = 0.9;
  expect_error([&] { ember::quantize_model(llama_f16().string(), out.string(), options); }, ErrorCode::invalid_argument,
               "hold_out is 0.9");
  fs::remove_all(dir);
}

TEST_CASE("measured sensitivity ranks a deliberately fragile tensor first and keeps it widest", "[quantize][kl]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("kl");
  write_text(dir / "calib.txt", 60);
  // blk.1.attn_output with an outlier in every block (the model computes the same
  // function): Q4_0 wipes most of its weights.
  const std::string fragile = "blk.1.attn_output.weight";
  const fs::path source = dir / "fragile.gguf";
  write_outliers(llama_f16(), source, 64.0f);

  ember::QuantizeOptions options;
  options.recipe = ember::QuantRecipe::q4_0;
  options.threads = 2;
  options.calibration_text = (dir / "calib.txt").string();
  options.sensitivity = ember::Sensitivity::kl;
  options.kl_windows = 1;
  options.kl_window_tokens = 128;
  int64_t measured_calls = 0;
  options.on_search = [&](const ember::SearchProgress& p) {
    if (std::string_view(p.phase) == "kl") measured_calls = p.group;
  };
  const ember::QuantizeReport r = ember::quantize_model(source.string(), (dir / "rtn.gguf").string(), options);
  CHECK(r.kl_windows == 1);
  CHECK(r.kl_tokens == 128);
  // Positions 16..127, every ceil(112 / 64) = 2nd, ending at 127: 56.
  CHECK(r.kl_positions == 56);
  const ember::QuantizedTensor* top = nullptr;
  const ember::QuantizedTensor* fragile_report = nullptr;
  size_t quantized = 0;
  for (const ember::QuantizedTensor& t : r.tensors) {
    if (!t.quantized) {
      CHECK(t.kl < 0);
      continue;
    }
    ++quantized;
    INFO(t.name << " KL " << t.kl);
    CHECK(t.kl >= 0);
    CHECK(t.kl_type == t.type_out);
    if (!top || t.kl > top->kl) top = &t;
    if (t.name == fragile) fragile_report = &t;
  }
  CHECK(measured_calls == int64_t(quantized));
  REQUIRE(top != nullptr);
  CHECK(top->name == fragile);
  // The proxy misses it: its relative weight error is the lowest of the Q4_0 tensors (the
  // outliers dominate its norm).
  for (const ember::QuantizedTensor& t : r.tensors)
    if (t.quantized && t.type_out == "Q4_0" && t.name != fragile) CHECK(top->relative_error < t.relative_error);

  // The KL of the fragile tensor, recomputed apart: a file with only it in Q4_0, the
  // logits of both models over the same window, KL at the same positions.
  {
    const auto file = ember::gguf::File::open(source);
    ember::gguf::Writer writer(file.alignment());
    for (const auto& kv : file.metadata())
      if (kv.key != "general.alignment") writer.add(kv.key, kv.value);
    std::vector<std::byte> q4;
    for (const auto& t : file.tensors()) {
      if (t.name != fragile) {
        writer.add_tensor(std::string(t.name), t.type, t.shape, std::span(t.data, t.n_bytes));
        continue;
      }
      std::vector<float> values(size_t(t.n_elements));
      ember::quant::dequantize_row(t.type, t.data, values.data(), int64_t(t.n_elements));
      q4.resize(ember::quant::row_bytes(DType::q4_0, t.cols()) * size_t(t.rows()));
      for (int64_t row = 0; row < t.rows(); ++row)
        q::quantize_values(DType::q4_0, values.data() + row * t.cols(),
                           q4.data() + size_t(row) * ember::quant::row_bytes(DType::q4_0, t.cols()), t.cols());
      writer.add_tensor(std::string(t.name), DType::q4_0, t.shape, q4);
    }
    writer.write(dir / "one.gguf");
    const auto src_model = ember::Model::load(source.string(), two_threads());
    const auto one_model = ember::Model::load((dir / "one.gguf").string(), two_threads());
    std::vector<int32_t> ids = {src_model->bos_token()};
    const std::vector<int32_t> text = src_model->tokenize(read_text(dir / "calib.txt"), false, false);
    ids.insert(ids.end(), text.begin(), text.begin() + 127);
    const std::vector<float> lp = src_model->new_session()->evaluate(ids);
    const std::vector<float> lq = one_model->new_session()->evaluate(ids);
    const size_t vocab = lp.size() / ids.size();
    double kl = 0;
    int scored = 0;
    for (size_t i = 16; i < ids.size(); ++i) {
      if ((ids.size() - 1 - i) % 2 != 0) continue;
      const std::span<const float> p(lp.data() + i * vocab, vocab), qq(lq.data() + i * vocab, vocab);
      double sum = 0;
      for (size_t v = 0; v < vocab; ++v) {
        const double log_p = ember::token_log_prob(p, int32_t(v)), log_q = ember::token_log_prob(qq, int32_t(v));
        sum += std::exp(log_p) * (log_p - log_q);
      }
      kl += sum;
      ++scored;
    }
    CHECK(scored == 56);
    REQUIRE(fragile_report != nullptr);
    CHECK(fragile_report->kl == Approx(kl / scored).epsilon(0.02));
  }

  // A mixture with room for one projection in Q8_0: the fragile one ends widest of all.
  {
    const auto rank = [](const std::string& type) { return type == "Q8_0" ? 2 : type == "Q5_0" ? 1 : 0; };
    const auto file = ember::gguf::File::open(source);
    const auto& t = file.tensor(fragile);
    const uint64_t extra = (ember::quant::row_bytes(DType::q8_0, t.cols()) - ember::quant::row_bytes(DType::q4_0, t.cols())) *
                           uint64_t(t.rows());
    options.budget_bytes = r.bytes_out + extra;
    const ember::QuantizeReport mixed = ember::quantize_model(source.string(), (dir / "mix.gguf").string(), options);
    int fragile_rank = -1, others_rank = 0;
    for (const ember::QuantizedTensor& m : mixed.tensors) {
      INFO(m.name << " " << m.type_out << " KL " << m.kl);
      if (m.name == fragile) {
        CHECK(m.mixed);
        fragile_rank = rank(m.type_out);
      } else if (m.mixed) {
        others_rank = std::max(others_rank, rank(m.type_out));
      }
    }
    CHECK(fragile_rank >= 1);
    CHECK(fragile_rank >= others_rank);
  }

  options.budget_bytes = 0;
  options.kl_window_tokens = 1 << 16;
  expect_error([&] { ember::quantize_model(source.string(), (dir / "x.gguf").string(), options); },
               ErrorCode::invalid_argument, "fewer than one sensitivity window of 65536 tokens");
  options.kl_window_tokens = 8;
  expect_error([&] { ember::quantize_model(source.string(), (dir / "x.gguf").string(), options); },
               ErrorCode::invalid_argument, "kl_window_tokens 8 (>= 16)");
  options.calibration_text.clear();
  expect_error([&] { ember::quantize_model(source.string(), (dir / "x.gguf").string(), options); },
               ErrorCode::invalid_argument, "--sensitivity kl needs a calibration text");
  CHECK_FALSE(fs::exists(dir / "x.gguf"));
  fs::remove_all(dir);
}
