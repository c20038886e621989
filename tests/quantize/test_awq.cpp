// AWQ (lib/quantize/awq.hpp, quantize_model --method awq): the scale search on a group
// whose inputs have outlier channels, the loss it reports against a direct computation,
// the folding into norms and ffn_up rows on a whole model, and the error paths.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <utility>
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
#include "quantize/awq.hpp"
#include "quantize/weight_quantizers.hpp"

namespace fs = std::filesystem;
using ember::ErrorCode;
using ember::quant::DType;
using ember::test::expect_error;

namespace {

// Inputs [n][cols] with a few channels 30x larger than the rest (as LLM activations have),
// a weight matrix [rows][cols], and H = sum x^T x.
struct Case {
  int64_t rows = 48, cols = 256, n = 1024;
  std::vector<float> x, w;
  ember::quantize::Hessian h;
};

Case outlier_case() {
  Case c;
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  c.x.resize(size_t(c.n * c.cols));
  for (int64_t i = 0; i < c.n; ++i)
    for (int64_t j = 0; j < c.cols; ++j) c.x[size_t(i * c.cols + j)] = g(rng) * (j % 37 == 5 ? 30.0f : 1.0f);
  c.w.resize(size_t(c.rows * c.cols));
  for (float& v : c.w) v = g(rng) * 0.05f;
  c.h.cols = c.cols;
  c.h.rows_seen = c.n;
  c.h.h.assign(size_t(c.cols * c.cols), 0.0);
  for (int64_t i = 0; i < c.n; ++i)
    for (int64_t a = 0; a < c.cols; ++a)
      for (int64_t b = 0; b < c.cols; ++b)
        c.h.h[size_t(a * c.cols + b)] += double(c.x[size_t(i * c.cols + a)]) * c.x[size_t(i * c.cols + b)];
  return c;
}

// sum over inputs and rows of ((w_hat - w) x)^2 / n, with w_hat = deq(q(w * s)) / s.
double output_error(const Case& c, DType type, const std::vector<float>& s) {
  std::vector<float> scaled(size_t(c.cols)), back(size_t(c.cols)), e(size_t(c.rows * c.cols));
  std::vector<std::byte> q(ember::quant::row_bytes(type, c.cols));
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t j = 0; j < c.cols; ++j) scaled[size_t(j)] = c.w[size_t(r * c.cols + j)] * s[size_t(j)];
    ember::quantize::quantize_values(type, scaled.data(), q.data(), c.cols);
    ember::quant::dequantize_row(type, q.data(), back.data(), c.cols);
    for (int64_t j = 0; j < c.cols; ++j)
      e[size_t(r * c.cols + j)] = back[size_t(j)] / s[size_t(j)] - c.w[size_t(r * c.cols + j)];
  }
  double total = 0;
  for (int64_t i = 0; i < c.n; ++i)
    for (int64_t r = 0; r < c.rows; ++r) {
      double y = 0;
      for (int64_t j = 0; j < c.cols; ++j) y += double(e[size_t(r * c.cols + j)]) * c.x[size_t(i * c.cols + j)];
      total += y * y;
    }
  return total / double(c.n);
}

}  // namespace

TEST_CASE("AWQ scales cut the output error of inputs with outlier channels", "[quantize][awq]") {
  const Case c = outlier_case();
  for (DType type : {DType::q4_0, DType::q4_k, DType::q4_g128}) {
    INFO(ember::quant::type_name(type));
    const ember::quantize::AwqMatrix m{.weights = c.w.data(), .rows = c.rows, .cols = c.cols, .type = type};
    const ember::quantize::AwqChoice choice =
        ember::quantize::awq_choose_scales(std::span(&m, 1), c.h, {.grid = 20, .search_rows = 1000, .threads = 2});
    const double rtn = output_error(c, type, std::vector<float>(size_t(c.cols), 1.0f));
    const double awq = output_error(c, type, choice.scales);
    CHECK(choice.alpha > 0.0);
    CHECK(awq < 0.7 * rtn);
    // The reported losses are the output errors over the calibration inputs (all rows searched).
    CHECK(choice.loss == Approx(awq).epsilon(1e-3));
    CHECK(choice.loss_rtn == Approx(rtn).epsilon(1e-3));
    // Larger activations get larger scales.
    CHECK(choice.scales[5] > choice.scales[6]);
  }
}

TEST_CASE("SmoothQuant scales are a_c^alpha / w_c^(1 - alpha) up to one factor", "[quantize][awq]") {
  // a_c: the rms of the calibration inputs on channel c; w_c: the largest |weight| of
  // column c over the group's matrices. Only ratios matter (one factor normalises them).
  const Case c = outlier_case();
  const ember::quantize::AwqMatrix m{.weights = c.w.data(), .rows = c.rows, .cols = c.cols, .type = DType::q8_w};
  for (double alpha : {0.0, 0.5, 0.8, 1.0}) {
    INFO("alpha " << alpha);
    const ember::quantize::AwqChoice choice =
        ember::quantize::awq_choose_scales(std::span(&m, 1), c.h, {.smooth_alpha = alpha});
    CHECK(choice.alpha == alpha);
    REQUIRE(choice.scales.size() == size_t(c.cols));
    auto expected = [&](int64_t col) {
      double sum2 = 0, wmax = 0;
      for (int64_t i = 0; i < c.n; ++i) sum2 += double(c.x[size_t(i * c.cols + col)]) * c.x[size_t(i * c.cols + col)];
      for (int64_t r = 0; r < c.rows; ++r) wmax = std::max(wmax, double(std::fabs(c.w[size_t(r * c.cols + col)])));
      return std::pow(std::sqrt(sum2 / double(c.n)), alpha) / std::pow(wmax, 1.0 - alpha);
    };
    for (int64_t col : {1, 5, 42, 200})
      CHECK(choice.scales[size_t(col)] / choice.scales[0] == Approx(expected(col) / expected(0)).epsilon(1e-4));
  }
  // Migrating the outlier channels (alpha 0.5) lowers the error of INT8 activations
  // quantized per token times Q8_W weights.
  auto w8a8_error = [&](const std::vector<float>& s) {
    std::vector<float> ws(c.w.size()), xs(size_t(c.cols));
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t j = 0; j < c.cols; ++j) ws[size_t(r * c.cols + j)] = c.w[size_t(r * c.cols + j)] * s[size_t(j)];
    std::vector<std::byte> wq(size_t(c.rows) * ember::quant::row_bytes(DType::q8_w, c.cols));
    const size_t row = ember::quant::row_bytes(DType::q8_w, c.cols);
    for (int64_t r = 0; r < c.rows; ++r)
      ember::quant::quantize_row(DType::q8_w, ws.data() + r * c.cols, wq.data() + size_t(r) * row, c.cols);
    std::vector<std::byte> xq(ember::quant::row_bytes(DType::q8_t, c.cols));
    double e2 = 0;
    for (int64_t i = 0; i < c.n; ++i) {
      for (int64_t j = 0; j < c.cols; ++j) xs[size_t(j)] = c.x[size_t(i * c.cols + j)] / s[size_t(j)];
      ember::quant::quantize_row(DType::q8_t, xs.data(), xq.data(), c.cols);
      for (int64_t r = 0; r < c.rows; ++r) {
        double exact = 0;
        for (int64_t j = 0; j < c.cols; ++j) exact += double(c.w[size_t(r * c.cols + j)]) * c.x[size_t(i * c.cols + j)];
        const double got = ember::quant::dot_row(DType::q8_w, wq.data() + size_t(r) * row, xq.data(), c.cols);
        e2 += (got - exact) * (got - exact);
      }
    }
    return e2;
  };
  const auto smooth = ember::quantize::awq_choose_scales(std::span(&m, 1), c.h, {.smooth_alpha = 0.5});
  const double plain = w8a8_error(std::vector<float>(size_t(c.cols), 1.0f)), smoothed = w8a8_error(smooth.scales);
  INFO("W8A8 output error: plain " << plain << ", smoothed " << smoothed);
  CHECK(smoothed < 0.7 * plain);
  expect_error([&] { (void)ember::quantize::awq_choose_scales(std::span(&m, 1), c.h, {.smooth_alpha = 1.5}); },
               ErrorCode::invalid_argument, "must be in [0, 1]");
}

TEST_CASE("SmoothQuant's search: its loss is the W8A8 error of the kept rows, and no fixed alpha beats it",
          "[quantize][awq]") {
  // The kept rows are the calibration inputs themselves (here: every 4th of the case's).
  Case c = outlier_case();
  for (int64_t i = 0; i < c.n; i += 4) {
    c.h.kept.insert(c.h.kept.end(), c.x.begin() + i * c.cols, c.x.begin() + (i + 1) * c.cols);
    ++c.h.n_kept;
  }
  c.h.abs_max.assign(size_t(c.cols), 0.0f);
  for (int64_t i = 0; i < c.n; ++i)
    for (int64_t j = 0; j < c.cols; ++j)
      c.h.abs_max[size_t(j)] = std::max(c.h.abs_max[size_t(j)], std::fabs(c.x[size_t(i * c.cols + j)]));
  // The direct W8A8 error over the kept rows: the real quantizers and dot product.
  auto w8a8_error = [&](DType type, const std::vector<float>& s) {
    const size_t row = ember::quant::row_bytes(type, c.cols);
    const DType act = ember::quant::activation_type(type);
    std::vector<float> ws(size_t(c.cols)), xs(size_t(c.cols));
    std::vector<std::byte> wq(size_t(c.rows) * row), xq(ember::quant::row_bytes(act, c.cols));
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t j = 0; j < c.cols; ++j) ws[size_t(j)] = c.w[size_t(r * c.cols + j)] * s[size_t(j)];
      ember::quantize::quantize_values(type, ws.data(), wq.data() + size_t(r) * row, c.cols);
    }
    double e2 = 0;
    for (int64_t i = 0; i < c.h.n_kept; ++i) {
      const float* x = c.h.kept.data() + i * c.cols;
      for (int64_t j = 0; j < c.cols; ++j) xs[size_t(j)] = x[j] / s[size_t(j)];
      ember::quant::quantize_row(act, xs.data(), xq.data(), c.cols);
      for (int64_t r = 0; r < c.rows; ++r) {
        double exact = 0;
        for (int64_t j = 0; j < c.cols; ++j) exact += double(c.w[size_t(r * c.cols + j)]) * x[j];
        const double got = ember::quant::dot_row(type, wq.data() + size_t(r) * row, xq.data(), c.cols);
        e2 += (got - exact) * (got - exact);
      }
    }
    return e2;
  };
  for (DType type : {DType::q8_w, DType::q8_0}) {
    INFO(ember::quant::type_name(type));
    const ember::quantize::AwqMatrix m{.weights = c.w.data(), .rows = c.rows, .cols = c.cols, .type = type};
    const ember::quantize::AwqChoice searched = ember::quantize::awq_choose_scales(
        std::span(&m, 1), c.h, {.smooth_search = true, .search_rows = 1000, .threads = 2});
    INFO("chose " << searched.statistic << " alpha " << searched.alpha);
    const double direct = w8a8_error(type, searched.scales);
    CHECK(searched.loss == Approx(direct).epsilon(1e-3));
    CHECK(searched.loss_rtn == Approx(w8a8_error(type, std::vector<float>(size_t(c.cols), 1.0f))).epsilon(1e-3));
    CHECK(searched.loss < 0.7 * searched.loss_rtn);
    // Every fixed alpha (the rms statistic) is a candidate of the search: none is better.
    for (double alpha : {0.25, 0.5, 0.75}) {
      const auto fixed = ember::quantize::awq_choose_scales(std::span(&m, 1), c.h, {.smooth_alpha = alpha});
      CHECK(direct <= w8a8_error(type, fixed.scales) * (1 + 1e-6));
    }
  }
  // Without kept rows the search cannot run.
  Case bare = outlier_case();
  const ember::quantize::AwqMatrix m{.weights = bare.w.data(), .rows = bare.rows, .cols = bare.cols, .type = DType::q8_w};
  expect_error([&] { (void)ember::quantize::awq_choose_scales(std::span(&m, 1), bare.h, {.smooth_search = true}); },
               ErrorCode::invalid_argument, "kept input rows");
}

TEST_CASE("AWQ's clipping search: no block's loss rises, and heavy-tailed weights lose output error",
          "[quantize][awq]") {
  Case c = outlier_case();
  // Heavy tails: one weight in 40 is 6x larger (as trained matrices have), which stretches
  // its block's grid under the max-based rules.
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> pick(0, 39);
  for (float& v : c.w)
    if (pick(rng) == 0) v *= 6.0f;
  std::vector<float> scale(size_t(c.cols));
  for (int64_t j = 0; j < c.cols; ++j) scale[size_t(j)] = 0.5f + float(j % 7) * 0.25f;   // AWQ-like column scales
  for (DType type : {DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q8_0, DType::q4_g128, DType::q4_g64}) {
    INFO(ember::quant::type_name(type));
    REQUIRE(ember::quantize::awq_can_clip(type));
    const int64_t width = ember::quant::type_info(type).block_elems;
    const size_t row_bytes = ember::quant::row_bytes(type, c.cols);
    std::vector<std::byte> plain(row_bytes * size_t(c.rows)), clipped(row_bytes * size_t(c.rows));
    std::vector<float> scaled(size_t(c.cols)), back_plain(size_t(c.cols)), back_clip(size_t(c.cols));
    int64_t blocks = 0, n_clipped = 0, rose = 0;
    std::vector<double> e_plain(size_t(c.rows * c.cols)), e_clip(size_t(c.rows * c.cols));
    for (int64_t r = 0; r < c.rows; ++r) {
      const float* w = c.w.data() + r * c.cols;
      for (int64_t j = 0; j < c.cols; ++j) scaled[size_t(j)] = w[j] * scale[size_t(j)];
      ember::quantize::quantize_values(type, scaled.data(), plain.data() + size_t(r) * row_bytes, c.cols);
      const ember::quantize::ClipCount n = ember::quantize::awq_quantize_row_clipped(
          type, w, scale.data(), c.cols, c.h, clipped.data() + size_t(r) * row_bytes);
      blocks += n.blocks;
      n_clipped += n.clipped;
      ember::quant::dequantize_row(type, plain.data() + size_t(r) * row_bytes, back_plain.data(), c.cols);
      ember::quant::dequantize_row(type, clipped.data() + size_t(r) * row_bytes, back_clip.data(), c.cols);
      for (int64_t j = 0; j < c.cols; ++j) {
        e_plain[size_t(r * c.cols + j)] = double(back_plain[size_t(j)]) / scale[size_t(j)] - w[j];
        e_clip[size_t(r * c.cols + j)] = double(back_clip[size_t(j)]) / scale[size_t(j)] - w[j];
      }
      // Each block's own loss e H_bb e^T, computed here from the decoded rows.
      for (int64_t b0 = 0; b0 < c.cols; b0 += width) {
        double lp = 0, lc = 0;
        for (int64_t i = b0; i < b0 + width; ++i)
          for (int64_t j = b0; j < b0 + width; ++j) {
            const double hij = c.h.h[size_t(i * c.cols + j)];
            lp += e_plain[size_t(r * c.cols + i)] * hij * e_plain[size_t(r * c.cols + j)];
            lc += e_clip[size_t(r * c.cols + i)] * hij * e_clip[size_t(r * c.cols + j)];
          }
        rose += lc > lp * (1 + 1e-12);
      }
    }
    CHECK(blocks == c.rows * c.cols / width);
    CHECK(rose == 0);
    CHECK(n_clipped > 0);
    CHECK(n_clipped < blocks);
    // The whole output error (all of H, cross-block terms included) falls too.
    const auto total = [&](const std::vector<double>& e) {
      double t = 0;
      for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t i = 0; i < c.cols; ++i) {
          double dot = 0;
          for (int64_t j = 0; j < c.cols; ++j) dot += c.h.h[size_t(i * c.cols + j)] * e[size_t(r * c.cols + j)];
          t += e[size_t(r * c.cols + i)] * dot;
        }
      return t;
    };
    const double tp = total(e_plain), tc = total(e_clip);
    INFO("output error: plain " << tp << ", clipped " << tc << ", " << n_clipped << " of " << blocks << " blocks clipped");
    CHECK(tc < 0.97 * tp);
  }
  // The K types are not clipped; a wrong type is a typed error.
  CHECK_FALSE(ember::quantize::awq_can_clip(DType::q4_k));
  CHECK_FALSE(ember::quantize::awq_can_clip(DType::q6_k));
  std::vector<std::byte> out(ember::quant::row_bytes(DType::q4_k, c.cols));
  expect_error([&] { (void)ember::quantize::awq_quantize_row_clipped(DType::q4_k, c.w.data(), scale.data(), c.cols, c.h, out.data()); },
               ErrorCode::invalid_argument, "does not apply to Q4_K");
}

TEST_CASE("AWQ rejects bad groups and options", "[quantize][awq]") {
  const Case c = outlier_case();
  const ember::quantize::AwqMatrix m{.weights = c.w.data(), .rows = c.rows, .cols = c.cols, .type = DType::q4_0};
  const auto run = [&](const ember::quantize::AwqMatrix& mm, const ember::quantize::AwqOptions& o) {
    (void)ember::quantize::awq_choose_scales(std::span(&mm, 1), c.h, o);
  };
  expect_error([&] { run(m, {.grid = 0}); }, ErrorCode::invalid_argument, "grid is 0");
  expect_error([&] { run(m, {.search_rows = 0}); }, ErrorCode::invalid_argument, "search_rows is 0");
  ember::quantize::AwqMatrix narrow = m;
  narrow.cols = 128;
  expect_error([&] { run(narrow, {}); }, ErrorCode::invalid_argument, "does not fit the 256-wide Hessian");
}

namespace {

fs::path llama_f16() { return ember::test::golden_dir() / "llama-F16.gguf"; }

ember::ModelOptions two_threads() {
  ember::ModelOptions options;
  options.threads = 2;
  return options;
}

fs::path scratch(const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("ember_test_awq_" + tag + "_" + std::to_string(::getpid()));
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

ember::QuantizeOptions awq_options(const fs::path& calib, ember::QuantRecipe recipe) {
  ember::QuantizeOptions options;
  options.recipe = recipe;
  options.method = ember::QuantMethod::awq;
  options.calibration_text = calib.string();
  options.samples = 16;
  options.sample_tokens = 64;
  options.threads = 2;
  return options;
}

// Logits of every token of `ids` with the model in `path`.
std::vector<float> logits_of(const fs::path& path, const std::vector<int32_t>& ids) {
  auto model = ember::Model::load(path.string(), two_threads());
  auto session = model->new_session();
  return session->evaluate(ids);
}

double rms_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s / double(a.size()));
}

// The rms logit error of each quantized file against the F16 source on one sentence.
std::pair<double, double> logit_errors(const fs::path& a, const fs::path& b) {
  auto model = ember::Model::load(llama_f16().string(), two_threads());
  const std::vector<int32_t> ids = model->tokenize("The harbour master logged the ships and the weather station", true);
  const std::vector<float> ref = logits_of(llama_f16(), ids);
  return {rms_diff(logits_of(a, ids), ref), rms_diff(logits_of(b, ids), ref)};
}

}  // namespace

TEST_CASE("quantize --method awq folds the scales so the model computes the same function", "[quantize][awq]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("model");
  write_text(dir / "calib.txt", 60);
  // Q8_0 everywhere: the quantization error is small, so a wrong fold (scales applied to
  // the weights but not undone in the norms / ffn_up rows) would dominate the difference.
  int64_t searches = 0;
  ember::QuantizeOptions options = awq_options(dir / "calib.txt", ember::QuantRecipe::q8_0);
  options.on_search = [&](const ember::SearchProgress& p) {
    ++searches;
    CHECK(p.group == searches);
  };
  const ember::QuantizeReport awq = ember::quantize_model(llama_f16().string(), (dir / "awq.gguf").string(), options);
  ember::QuantizeOptions rtn_options;
  rtn_options.recipe = ember::QuantRecipe::q8_0;
  ember::quantize_model(llama_f16().string(), (dir / "rtn.gguf").string(), rtn_options);

  const ember::gguf::File src = ember::gguf::File::open(llama_f16());
  const int64_t n_layer = int64_t(src.get_uint("llama.block_count"));
  CHECK(searches == 3 * n_layer);
  CHECK(awq.awq_skipped.empty());
  int64_t scaled = 0, folded = 0;
  for (const ember::QuantizedTensor& t : awq.tensors) {
    INFO(t.name);
    const bool projection = t.name.find("attn_q.") != std::string::npos || t.name.find("attn_k.") != std::string::npos ||
                            t.name.find("attn_v.") != std::string::npos || t.name.find("ffn_") != std::string::npos;
    const bool norm = t.name.find("attn_norm") != std::string::npos || t.name.find("ffn_norm") != std::string::npos;
    if (t.quantized) CHECK(t.awq == projection);
    if (norm) {
      CHECK(t.awq);
      CHECK(t.type_out == "F32");
    }
    scaled += t.quantized && t.awq && t.awq_alpha > 0;
    folded += norm && t.awq_alpha > 0;
  }
  CHECK(scaled > 0);
  CHECK(folded > 0);

  const auto [e_awq, e_rtn] = logit_errors(dir / "awq.gguf", dir / "rtn.gguf");
  INFO("rms logit error: awq " << e_awq << ", rtn " << e_rtn);
  CHECK(e_awq < 2.0 * e_rtn);
  fs::remove_all(dir);
}

TEST_CASE("quantize --method awq clips the blocks of Q4_0 projections; awq_clip = false does not", "[quantize][awq]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("clip");
  write_text(dir / "calib.txt", 60);
  ember::QuantizeOptions options = awq_options(dir / "calib.txt", ember::QuantRecipe::q4_0);
  const ember::QuantizeReport clip = ember::quantize_model(llama_f16().string(), (dir / "clip.gguf").string(), options);
  options.awq_clip = false;
  const ember::QuantizeReport plain = ember::quantize_model(llama_f16().string(), (dir / "plain.gguf").string(), options);
  REQUIRE(clip.tensors.size() == plain.tensors.size());
  int64_t with_clipped = 0;
  for (size_t i = 0; i < clip.tensors.size(); ++i) {
    const ember::QuantizedTensor &a = clip.tensors[i], &b = plain.tensors[i];
    INFO(a.name);
    CHECK(b.awq_clipped == 0.0);
    CHECK(a.awq_clipped >= 0.0);
    CHECK(a.awq_clipped < 1.0);
    if (!a.awq || !a.quantized) CHECK(a.awq_clipped == 0.0);
    with_clipped += a.awq_clipped > 0;
    CHECK(a.awq_alpha == b.awq_alpha);   // the scale search is the same; only the rounding differs
  }
  CHECK(with_clipped > 0);
  const ember::gguf::File fa = ember::gguf::File::open(dir / "clip.gguf"), fb = ember::gguf::File::open(dir / "plain.gguf");
  size_t differ = 0;
  for (size_t i = 0; i < fa.tensors().size(); ++i)
    differ += std::memcmp(fa.tensors()[i].data, fb.tensors()[i].data, fa.tensors()[i].n_bytes) != 0;
  CHECK(differ == size_t(with_clipped));
  fs::remove_all(dir);
}

TEST_CASE("quantize --method smoothquant --smooth-alpha auto: a choice per group, reported, no worse than alpha 0.5",
          "[quantize][awq]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("smooth");
  write_text(dir / "calib.txt", 60);
  ember::QuantizeOptions options = awq_options(dir / "calib.txt", ember::QuantRecipe::q8_w);
  options.method = ember::QuantMethod::smoothquant;
  const ember::QuantizeReport fixed = ember::quantize_model(llama_f16().string(), (dir / "fixed.gguf").string(), options);
  options.smooth_alpha = ember::QuantizeOptions::smooth_alpha_search;
  const ember::QuantizeReport searched =
      ember::quantize_model(llama_f16().string(), (dir / "searched.gguf").string(), options);
  int64_t reported = 0;
  for (const ember::QuantizedTensor& t : searched.tensors) {
    INFO(t.name);
    if (!t.awq) continue;
    ++reported;
    const bool known = t.smooth_statistic == "rms" || t.smooth_statistic == "max" || t.smooth_statistic == "none";
    CHECK(known);
    CHECK(t.awq_alpha >= 0.0);
    CHECK(t.awq_alpha <= 1.0);
  }
  CHECK(reported > 0);
  for (const ember::QuantizedTensor& t : fixed.tensors)
    if (t.awq) CHECK(t.smooth_statistic == "rms");
  // The searched file is at least about as close to the source as the fixed alpha's.
  const auto [e_fixed, e_searched] = logit_errors(dir / "fixed.gguf", dir / "searched.gguf");
  INFO("logit rms error: alpha 0.5 " << e_fixed << ", searched " << e_searched);
  CHECK(e_searched < 1.1 * e_fixed);
  fs::remove_all(dir);
}

TEST_CASE("quantize --method smoothquant smooths attn_output through attn_v's rows, shared by a kv head's query heads",
          "[quantize][awq]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("smooth_o");
  write_text(dir / "calib.txt", 60);
  ember::QuantizeOptions options = awq_options(dir / "calib.txt", ember::QuantRecipe::q8_w);
  options.method = ember::QuantMethod::smoothquant;
  int64_t groups = 0;
  options.on_search = [&](const ember::SearchProgress& p) {
    if (std::string(p.phase) == "awq") groups = std::max(groups, p.groups);
  };
  const ember::QuantizeReport smooth = ember::quantize_model(llama_f16().string(), (dir / "smooth.gguf").string(), options);
  ember::QuantizeOptions rtn_options;
  rtn_options.recipe = ember::QuantRecipe::q8_w;
  ember::quantize_model(llama_f16().string(), (dir / "rtn.gguf").string(), rtn_options);

  const ember::gguf::File src = ember::gguf::File::open(llama_f16());
  const int64_t n_layer = int64_t(src.get_uint("llama.block_count"));
  CHECK(groups == 4 * n_layer);   // ffn_down, ffn_gate/up, attn_output, attn_q/k/v per layer
  CHECK(smooth.awq_skipped.empty());
  int64_t outputs = 0;
  for (const ember::QuantizedTensor& t : smooth.tensors)
    if (t.name.find("attn_output.") != std::string::npos) {
      INFO(t.name);
      CHECK(t.awq);
      CHECK(t.awq_alpha == 0.5);
      ++outputs;
    }
  CHECK(outputs == n_layer);

  // The smoothed file computes the source's function: attn_output's column j was multiplied
  // by s_j, so value channel j of its kv head must come out divided by s_j. Were the fold
  // missing or applied per query head (8 query heads read 2 kv heads here), the attention
  // output would be off by those factors and the logits far from the source's.
  const ember::gguf::File out = ember::gguf::File::open(dir / "smooth.gguf");
  const auto values = [](const ember::gguf::TensorInfo& t) {
    std::vector<float> v(size_t(t.rows() * t.cols()));
    const size_t row = ember::quant::row_bytes(t.type, t.cols());
    for (int64_t r = 0; r < t.rows(); ++r)
      ember::quant::dequantize_row(t.type, t.data + size_t(r) * row, v.data() + r * t.cols(), t.cols());
    return v;
  };
  const ember::gguf::TensorInfo* o_src = src.find_tensor("blk.0.attn_output.weight");
  const ember::gguf::TensorInfo* o_out = out.find_tensor("blk.0.attn_output.weight");
  REQUIRE(o_src);
  REQUIRE(o_out);
  const std::vector<float> a = values(*o_src), b = values(*o_out);
  const int64_t cols = o_src->cols(), head_dim = 32, group = 4;
  // Column scale of o: the median ratio over rows; the query heads of one kv head share it.
  const auto col_scale = [&](int64_t j) {
    std::vector<double> r;
    for (int64_t i = 0; i < o_src->rows(); ++i)
      if (std::fabs(a[size_t(i * cols + j)]) > 1e-3) r.push_back(double(b[size_t(i * cols + j)]) / a[size_t(i * cols + j)]);
    std::nth_element(r.begin(), r.begin() + ptrdiff_t(r.size() / 2), r.end());
    return r[r.size() / 2];
  };
  double spread = 0, within = 0;
  for (int64_t d = 0; d < head_dim; ++d) {
    const double s0 = col_scale(d), s1 = col_scale(head_dim + d), s4 = col_scale(group * head_dim + d);
    within = std::max(within, std::fabs(s1 / s0 - 1.0));     // query heads 0 and 1 share kv head 0
    spread = std::max(spread, std::fabs(s4 / s0 - 1.0));     // query head 4 reads kv head 1
  }
  INFO("largest scale ratio within a kv head's query heads " << within << ", across kv heads " << spread);
  CHECK(within < 0.02);
  CHECK(spread > 0.02);
  const auto [e_smooth, e_rtn] = logit_errors(dir / "smooth.gguf", dir / "rtn.gguf");
  INFO("rms logit error: smoothquant " << e_smooth << ", rtn " << e_rtn);
  CHECK(e_smooth < 1.5 * e_rtn);
  fs::remove_all(dir);
}

TEST_CASE("quantize --method awq: bad input is a typed error and leaves no output", "[quantize][awq]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("errors");
  const fs::path out = dir / "out.gguf";
  write_text(dir / "calib.txt", 40);
  const auto run = [&](const ember::QuantizeOptions& options) {
    ember::quantize_model(llama_f16().string(), out.string(), options);
  };
  SECTION("no calibration text") {
    expect_error([&] { run(awq_options("", ember::QuantRecipe::q4_k_m)); }, ErrorCode::invalid_argument,
                 "--method awq needs a calibration text");
  }
  SECTION("a calibration text that does not exist") {
    expect_error([&] { run(awq_options(dir / "missing.txt", ember::QuantRecipe::q4_0)); }, ErrorCode::io, "missing.txt");
  }
  SECTION("zero samples") {
    ember::QuantizeOptions options = awq_options(dir / "calib.txt", ember::QuantRecipe::q4_0);
    options.samples = 0;
    expect_error([&] { run(options); }, ErrorCode::invalid_argument, "samples is 0");
  }
  CHECK_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("quantize --eval reports both perplexities; a lenient --max-ppl-rise changes nothing", "[quantize][eval]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("eval");
  write_text(dir / "eval.txt", 40);
  const fs::path out = dir / "out.gguf";
  ember::QuantizeOptions options;
  options.recipe = ember::QuantRecipe::q4_0;
  options.threads = 2;
  options.eval_text = (dir / "eval.txt").string();
  options.eval_ctx = 64;
  int64_t calls[2] = {0, 0};
  options.on_eval = [&](int model, int64_t chunk, int64_t) { calls[model] = chunk; };
  const ember::QuantizeReport first = ember::quantize_model(llama_f16().string(), out.string(), options);
  REQUIRE(fs::exists(out));
  CHECK_FALSE(first.rejected);
  CHECK(calls[0] > 1);
  CHECK(calls[1] == calls[0]);
  CHECK(first.eval_scored == calls[0] * 31);   // 31 tokens scored per chunk of 64

  // The same figures as ember::perplexity on each file.
  std::string text;
  {
    std::ifstream in(dir / "eval.txt");
    text.assign(std::istreambuf_iterator<char>(in), {});
    text.pop_back();   // the trailing newline, as quantize drops it
  }
  ember::PerplexityOptions popts;
  popts.ctx = 64;
  const auto source = ember::Model::load(llama_f16().string(), two_threads());
  const auto written = ember::Model::load(out.string(), two_threads());
  CHECK(first.ppl_before == Approx(ember::perplexity(*source, text, popts).perplexity).epsilon(1e-12));
  CHECK(first.ppl_after == Approx(ember::perplexity(*written, text, popts).perplexity).epsilon(1e-12));
  const double rise = first.ppl_after / first.ppl_before - 1.0;
  INFO("perplexity " << first.ppl_before << " -> " << first.ppl_after);
  REQUIRE(rise > 0.0);   // Q4_0 of this model costs some perplexity on this text

  // A limit above the rise lets the first file through unchanged (the gate's rounds:
  // tests/quantize/test_gate.cpp).
  fs::remove(out);
  options.max_ppl_rise = rise * 2;
  const ember::QuantizeReport lenient = ember::quantize_model(llama_f16().string(), out.string(), options);
  CHECK_FALSE(lenient.rejected);
  CHECK(lenient.gate_rounds.empty());
  CHECK(lenient.ppl_after == first.ppl_after);
  CHECK(fs::exists(out));
  for (const auto& e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);

  options.eval_text.clear();
  expect_error([&] { ember::quantize_model(llama_f16().string(), out.string(), options); }, ErrorCode::invalid_argument,
               "--max-ppl-rise needs an evaluation text");
  options.eval_text = (dir / "missing.txt").string();
  expect_error([&] { ember::quantize_model(llama_f16().string(), out.string(), options); }, ErrorCode::io,
               "cannot read the evaluation text");
  fs::remove_all(dir);
}
