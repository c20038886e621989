// GPTQ onto Q4_0 (lib/quantize/gptq.hpp, calibration.hpp, quantize_model --method gptq):
// the fast implementation against a slow scalar reference written from the paper,
// its output error against round-to-nearest's, and the error paths.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "common/expect_error.hpp"
#include "common/fp16.hpp"
#include "common/paths.hpp"
#include "ember/quantize.hpp"
#include "gguf/gguf.hpp"
#include "quant/blocks.hpp"
#include "quant/formats.hpp"
#include "quant/quant.hpp"
#include "quantize/gptq.hpp"

namespace fs = std::filesystem;
using ember::ErrorCode;
using ember::test::expect_error;

namespace {

using Matrix = std::vector<std::vector<double>>;

// Lower Cholesky factor L of a (a = L L^T), plain loops.
Matrix cholesky_lower(const Matrix& a) {
  const size_t n = a.size();
  Matrix l(n, std::vector<double>(n, 0.0));
  for (size_t j = 0; j < n; ++j) {
    double s = a[j][j];
    for (size_t k = 0; k < j; ++k) s -= l[j][k] * l[j][k];
    REQUIRE(s > 0);
    l[j][j] = std::sqrt(s);
    for (size_t i = j + 1; i < n; ++i) {
      double t = a[i][j];
      for (size_t k = 0; k < j; ++k) t -= l[i][k] * l[j][k];
      l[i][j] = t / l[j][j];
    }
  }
  return l;
}

// The paper's algorithm, one column at a time, every later column updated at once,
// scalar code only: dead columns, damping, U = chol(H^-1) upper, Q4_0 scales chosen at
// each block's start by llama.cpp's rule.
std::vector<std::byte> reference_gptq(const std::vector<float>& weights, size_t rows, size_t cols, Matrix h,
                                      double damp) {
  Matrix w(rows, std::vector<double>(cols));
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) w[r][c] = weights[r * cols + c];
  double mean = 0;
  for (size_t i = 0; i < cols; ++i) {
    if (h[i][i] <= 0) {
      for (size_t k = 0; k < cols; ++k) h[i][k] = h[k][i] = 0;
      h[i][i] = 1;
      for (size_t r = 0; r < rows; ++r) w[r][i] = 0;
    }
    mean += h[i][i];
  }
  mean /= double(cols);
  for (size_t i = 0; i < cols; ++i) h[i][i] += damp * mean;
  // H^-1 = L^-T L^-1 column by column (solve L y = e_i, then L^T x = y).
  const Matrix l = cholesky_lower(h);
  Matrix inv(cols, std::vector<double>(cols));
  for (size_t i = 0; i < cols; ++i) {
    std::vector<double> y(cols, 0.0), x(cols, 0.0);
    for (size_t k = 0; k < cols; ++k) {
      double s = k == i ? 1.0 : 0.0;
      for (size_t m = 0; m < k; ++m) s -= l[k][m] * y[m];
      y[k] = s / l[k][k];
    }
    for (size_t k = cols; k-- > 0;) {
      double s = y[k];
      for (size_t m = k + 1; m < cols; ++m) s -= l[m][k] * x[m];
      x[k] = s / l[k][k];
    }
    for (size_t k = 0; k < cols; ++k) inv[k][i] = x[k];
  }
  const Matrix li = cholesky_lower(inv);   // H^-1 = Li Li^T, so U = Li^T
  std::vector<std::byte> out(rows * cols / 32 * sizeof(ember::quant::BlockQ4_0));
  auto* blocks = reinterpret_cast<ember::quant::BlockQ4_0*>(out.data());
  for (size_t r = 0; r < rows; ++r) {
    float id = 0, d16 = 0;
    for (size_t j = 0; j < cols; ++j) {
      ember::quant::BlockQ4_0& b = blocks[r * cols / 32 + j / 32];
      if (j % 32 == 0) {
        float amax = 0, max = 0;
        for (size_t k = j; k < j + 32; ++k)
          if (amax < std::fabs(float(w[r][k]))) amax = std::fabs(float(w[r][k])), max = float(w[r][k]);
        const float d = max / -8;
        id = d != 0 ? 1.0f / d : 0.0f;
        b.d = ember::fp32_to_fp16(d);
        d16 = ember::fp16_to_fp32(b.d);
        std::memset(b.qs, 0, sizeof b.qs);
      }
      const float t = float(w[r][j]) * id + 8.5f;
      const int q = t <= 0 ? 0 : t >= 15 ? 15 : int(t);
      b.qs[j % 16] |= uint8_t(q << (j % 32 < 16 ? 0 : 4));
      const double e = (w[r][j] - double(float(q - 8) * d16)) / li[j][j];
      for (size_t k = j + 1; k < cols; ++k) w[r][k] -= e * li[k][j];
    }
  }
  return out;
}

// X [n][cols] with correlated, unevenly scaled channels (as activations are), H = X^T X.
struct Synthetic {
  std::vector<float> x;   // [n][cols]
  Matrix h;
};
Synthetic synthetic_inputs(size_t n, size_t cols, std::mt19937& rng, size_t dead_column) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> mix(cols * cols), scale(cols);
  for (float& m : mix) m = normal(rng) * 0.3f;
  for (size_t c = 0; c < cols; ++c) scale[c] = std::exp(normal(rng));
  Synthetic s{std::vector<float>(n * cols), Matrix(cols, std::vector<double>(cols, 0.0))};
  std::vector<float> z(cols);
  for (size_t i = 0; i < n; ++i) {
    for (float& v : z) v = normal(rng);
    for (size_t c = 0; c < cols; ++c) {
      float v = z[c];
      for (size_t k = 0; k < cols; k += 7) v += mix[c * cols + k] * z[k];
      s.x[i * cols + c] = c == dead_column ? 0.0f : v * scale[c];
    }
  }
  for (size_t i = 0; i < n; ++i)
    for (size_t a = 0; a < cols; ++a)
      for (size_t b = 0; b < cols; ++b) s.h[a][b] += double(s.x[i * cols + a]) * double(s.x[i * cols + b]);
  return s;
}

std::vector<double> flat(const Matrix& m) {
  std::vector<double> out;
  for (const auto& row : m) out.insert(out.end(), row.begin(), row.end());
  return out;
}

std::vector<float> random_weights(size_t rows, size_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> w(rows * cols);
  for (float& v : w) v = normal(rng);
  return w;
}

// sum over inputs x of ||W x - W_hat x||^2, W_hat the dequantized Q4_0 rows.
double output_error(const std::vector<float>& x, size_t n, const std::vector<float>& w, const std::vector<std::byte>& q,
                    size_t rows, size_t cols) {
  std::vector<float> deq(rows * cols);
  const size_t row_bytes = ember::quant::row_bytes(ember::quant::DType::q4_0, int64_t(cols));
  for (size_t r = 0; r < rows; ++r)
    ember::quant::dequantize_row(ember::quant::DType::q4_0, q.data() + r * row_bytes, deq.data() + r * cols,
                                 int64_t(cols));
  double total = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t r = 0; r < rows; ++r) {
      double e = 0;
      for (size_t c = 0; c < cols; ++c) e += (double(w[r * cols + c]) - deq[r * cols + c]) * x[i * cols + c];
      total += e * e;
    }
  return total;
}

}  // namespace

TEST_CASE("GPTQ Q4_0 bytes equal the scalar reference's", "[quantize][gptq]") {
  std::mt19937 rng(1234);
  const size_t rows = 12, cols = 192;   // two lazy batches of 128 columns, the second partial
  const Synthetic s = synthetic_inputs(400, cols, rng, 37);   // column 37 is dead
  const std::vector<float> w = random_weights(rows, cols, rng);
  const std::vector<std::byte> expected = reference_gptq(w, rows, cols, s.h, 0.01);
  for (int64_t block_columns : {32, 128, 256}) {
    INFO("block_columns " << block_columns);
    std::vector<std::byte> got(expected.size());
    ember::quantize::gptq_quantize_q4_0(w.data(), int64_t(rows), int64_t(cols), flat(s.h).data(), got.data(),
                                        {.damp = 0.01, .block_columns = block_columns});
    CHECK(got == expected);
  }
  // And not round-to-nearest's bytes.
  std::vector<std::byte> rtn(expected.size());
  ember::quant::ref::quantize_q4_0(w.data(), rtn.data(), int64_t(rows * cols));
  CHECK(rtn != expected);
}

TEST_CASE("GPTQ's output error on the calibration inputs is below round-to-nearest's", "[quantize][gptq]") {
  std::mt19937 rng(99);
  const size_t rows = 64, cols = 128, n = 512;
  const Synthetic s = synthetic_inputs(n, cols, rng, cols);   // no dead column
  const std::vector<float> w = random_weights(rows, cols, rng);
  std::vector<std::byte> gptq(rows * cols / 32 * sizeof(ember::quant::BlockQ4_0)), rtn(gptq.size());
  ember::quantize::gptq_quantize_q4_0(w.data(), int64_t(rows), int64_t(cols), flat(s.h).data(), gptq.data());
  ember::quant::ref::quantize_q4_0(w.data(), rtn.data(), int64_t(rows * cols));
  const double e_gptq = output_error(s.x, n, w, gptq, rows, cols), e_rtn = output_error(s.x, n, w, rtn, rows, cols);
  INFO("output error: gptq " << e_gptq << ", rtn " << e_rtn);
  CHECK(e_gptq < 0.7 * e_rtn);
}

TEST_CASE("GPTQ rejects bad sizes, options and values", "[quantize][gptq]") {
  std::vector<float> w(2 * 64, 0.1f);
  std::vector<double> h(64 * 64, 0.0);
  for (size_t i = 0; i < 64; ++i) h[i * 64 + i] = 1.0;
  std::vector<std::byte> out(2 * 2 * sizeof(ember::quant::BlockQ4_0));
  using ember::quantize::gptq_quantize_q4_0;
  expect_error([&] { gptq_quantize_q4_0(w.data(), 2, 48, h.data(), out.data()); }, ErrorCode::invalid_argument,
               "multiple of 32");
  expect_error([&] { gptq_quantize_q4_0(w.data(), 2, 64, h.data(), out.data(), {.damp = 0}); },
               ErrorCode::invalid_argument, "damp is 0");
  expect_error([&] { gptq_quantize_q4_0(w.data(), 2, 64, h.data(), out.data(), {.block_columns = 48}); },
               ErrorCode::invalid_argument, "block_columns is 48");
  h[5] = std::nan("");
  expect_error([&] { gptq_quantize_q4_0(w.data(), 2, 64, h.data(), out.data()); }, ErrorCode::malformed_file,
               "non-finite");
  h[5] = 0.0;
  w[3] = INFINITY;
  expect_error([&] { gptq_quantize_q4_0(w.data(), 2, 64, h.data(), out.data()); }, ErrorCode::malformed_file,
               "not finite");
  // An all-dead Hessian (an input that is always zero) is no error: every weight is 0.
  w[3] = 0.1f;
  std::fill(h.begin(), h.end(), 0.0);
  gptq_quantize_q4_0(w.data(), 2, 64, h.data(), out.data());
  std::vector<float> back(128);
  ember::quant::dequantize_row(ember::quant::DType::q4_0, out.data(), back.data(), 128);
  for (float v : back) CHECK(v == 0.0f);
}

namespace {

fs::path llama_f16() { return ember::test::golden_dir() / "llama-F16.gguf"; }

fs::path scratch(const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("ember_test_gptq_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// An English text of a few thousand tokens.
void write_text(const fs::path& path, int paragraphs) {
  std::ofstream out(path);
  for (int i = 0; i < paragraphs; ++i)
    out << "Paragraph " << i << ". The quick brown fox jumps over the lazy dog while the committee reviews "
        << "the annual report on river water quality, noting " << i * 7 % 13 << " new measurements and a "
        << "steady decline in the number of complaints since the previous spring.\n";
}

ember::QuantizeOptions gptq_options(const fs::path& calib, int64_t samples, int64_t sample_tokens) {
  ember::QuantizeOptions options;
  options.recipe = ember::QuantRecipe::q4_0;
  options.method = ember::QuantMethod::gptq;
  options.calibration_text = calib.string();
  options.samples = samples;
  options.sample_tokens = sample_tokens;
  return options;
}

}  // namespace

TEST_CASE("quantize --method gptq writes ordinary Q4_0 tensors for the calibrated projections", "[quantize][gptq]") {
  REQUIRE(fs::exists(llama_f16()));
  const fs::path dir = scratch("model");
  write_text(dir / "calib.txt", 40);
  ember::QuantizeOptions options = gptq_options(dir / "calib.txt", 1000, 64);
  int64_t progress_calls = 0, last_total = 0;
  options.on_calibration = [&](const ember::CalibrationProgress& p) {
    ++progress_calls;
    CHECK(p.sample == progress_calls);
    last_total = p.samples;
  };
  const ember::QuantizeReport gptq = ember::quantize_model(llama_f16().string(), (dir / "gptq.gguf").string(), options);
  ember::QuantizeOptions rtn_options;
  rtn_options.recipe = ember::QuantRecipe::q4_0;
  const ember::QuantizeReport rtn = ember::quantize_model(llama_f16().string(), (dir / "rtn.gguf").string(), rtn_options);

  // The text is too short for 1000 samples: all it holds are used, with a warning.
  CHECK(gptq.calibration_samples > 1);
  CHECK(gptq.calibration_samples < 1000);
  CHECK(progress_calls == gptq.calibration_samples);
  CHECK(last_total == gptq.calibration_samples);
  CHECK(gptq.calibration_tokens == gptq.calibration_samples * 64);
  REQUIRE(gptq.warnings.size() == 1);
  CHECK_THAT(gptq.warnings[0], Catch::Matchers::Contains("fewer than the 1000 asked for"));

  const ember::gguf::File a = ember::gguf::File::open(dir / "gptq.gguf"), b = ember::gguf::File::open(dir / "rtn.gguf");
  REQUIRE(a.tensors().size() == b.tensors().size());
  REQUIRE(gptq.tensors.size() == a.tensors().size());
  size_t n_gptq = 0;
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const auto &ta = a.tensors()[i], &tb = b.tensors()[i];
    INFO(ta.name);
    CHECK(ta.name == tb.name);
    CHECK(ta.type == tb.type);   // the same types as round-to-nearest: Q4_0 where it has Q4_0
    REQUIRE(ta.n_bytes == tb.n_bytes);
    const bool same = std::memcmp(ta.data, tb.data, ta.n_bytes) == 0;
    const bool projection = ta.name.find("attn_") != std::string::npos || ta.name.find("ffn_") != std::string::npos;
    const bool is_q4_0 = ta.type == ember::quant::DType::q4_0;
    CHECK(gptq.tensors[i].gptq == (projection && is_q4_0 && ta.shape.size() == 2));
    if (gptq.tensors[i].gptq) {
      ++n_gptq;
      CHECK_FALSE(same);
    } else {
      CHECK(same);   // everything else as round-to-nearest writes it
    }
  }
  CHECK(n_gptq >= 7);   // at least one layer's seven projections
  fs::remove_all(dir);
}

TEST_CASE("quantize --method gptq: bad input is a typed error and leaves no output", "[quantize][gptq]") {
  REQUIRE(fs::exists(llama_f16()));
  const fs::path dir = scratch("errors");
  const fs::path out = dir / "out.gguf";
  write_text(dir / "calib.txt", 40);
  const auto run = [&](const ember::QuantizeOptions& options) {
    ember::quantize_model(llama_f16().string(), out.string(), options);
  };
  SECTION("a calibration text that does not exist") {
    expect_error([&] { run(gptq_options(dir / "missing.txt", 4, 64)); }, ErrorCode::io, "missing.txt");
  }
  SECTION("no calibration text") {
    expect_error([&] { run(gptq_options("", 4, 64)); }, ErrorCode::invalid_argument, "--calib FILE");
  }
  SECTION("a text too short for one sample") {
    std::ofstream(dir / "short.txt") << "Too short.";
    expect_error([&] { run(gptq_options(dir / "short.txt", 4, 64)); }, ErrorCode::invalid_argument,
                 "fewer than one sample of 64 tokens");
  }
  SECTION("a type GPTQ does not write") {
    ember::QuantizeOptions options = gptq_options(dir / "calib.txt", 4, 64);
    options.recipe = ember::QuantRecipe::q4_k_m;
    expect_error([&] { run(options); }, ErrorCode::unsupported, "Q4_0 only, not Q4_K_M");
  }
  SECTION("zero samples, a bad damping") {
    expect_error([&] { run(gptq_options(dir / "calib.txt", 0, 64)); }, ErrorCode::invalid_argument, "samples is 0");
    ember::QuantizeOptions options = gptq_options(dir / "calib.txt", 4, 64);
    options.damp = -1;
    expect_error([&] { run(options); }, ErrorCode::invalid_argument, "damp is -1");
  }
  CHECK_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
  fs::remove_all(dir);
}
