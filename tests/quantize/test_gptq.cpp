// GPTQ onto every GGUF block type and ember's INT4 groups, with and without act-order (lib/quantize/gptq.hpp,
// calibration.hpp, quantize_model --method gptq): the fast implementation against a
// slow scalar reference written from the paper, its output error against
// round-to-nearest's, and the error paths.
#include <unistd.h>

#include <algorithm>
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
#include "quantize/k_search.hpp"
#include "quantize/weight_quantizers.hpp"

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

// Q4_K's six-bit scale and min of sub-block j from the 12 packed bytes (the GGUF
// layout: j < 4 in the low 6 bits of bytes j and j + 4; j >= 4 split between byte
// j + 4's nibbles and the top 2 bits of bytes j - 4 and j).
void k_scale_min(const uint8_t* b, int j, int& sc, int& mn) {
  if (j < 4) {
    sc = b[j] & 63;
    mn = b[j + 4] & 63;
  } else {
    sc = (b[j + 4] & 15) | ((b[j - 4] >> 6) << 4);
    mn = (b[j + 4] >> 4) | ((b[j] >> 6) << 4);
  }
}

// The factor U of the damped, permuted H^-1 with the dead columns' weights zeroed (w is
// [rows][cols]) and the quantization order: the dead-column rule, the act-order
// permutation (decreasing H[i][i], ties by index), damping, U = chol(H^-1) upper from an
// explicit inverse.
struct ReferenceFactor {
  Matrix li;   // lower: H^-1 = Li Li^T, U = Li^T
  std::vector<size_t> order;
};
ReferenceFactor reference_factor(Matrix h, std::vector<double>& w, size_t rows, size_t cols, double damp,
                                 bool act_order) {
  double mean = 0;
  for (size_t i = 0; i < cols; ++i) {
    if (h[i][i] <= 0) {
      for (size_t k = 0; k < cols; ++k) h[i][k] = h[k][i] = 0;
      h[i][i] = 1;
      for (size_t r = 0; r < rows; ++r) w[r * cols + i] = 0;
    }
    mean += h[i][i];
  }
  mean /= double(cols);
  ReferenceFactor f;
  f.order.resize(cols);
  for (size_t i = 0; i < cols; ++i) f.order[i] = i;
  if (act_order) std::stable_sort(f.order.begin(), f.order.end(), [&](size_t a, size_t b) { return h[a][a] > h[b][b]; });
  Matrix hp(cols, std::vector<double>(cols));
  for (size_t a = 0; a < cols; ++a)
    for (size_t b = 0; b < cols; ++b) hp[a][b] = h[f.order[a]][f.order[b]];
  for (size_t i = 0; i < cols; ++i) hp[i][i] += damp * mean;
  const Matrix l = cholesky_lower(hp);
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
  f.li = cholesky_lower(inv);
  return f;
}

// The paper's algorithm, one row and one column at a time, every later column updated
// at once, scalar code only, on reference_factor's U and order.
// A block's grid is chosen when the first of its columns comes up, from the current
// values of all its columns: Q4_0 by llama.cpp's rule (written out here); Q4_K by
// ember's searched round-to-nearest quantizer (checked byte for byte against
// llama-quantize in test_quantize), whose codes are then replaced value by value.
std::vector<std::byte> reference_gptq(ember::quant::DType type, const std::vector<float>& weights, size_t rows,
                                      size_t cols, Matrix h, double damp, bool act_order = false) {
  const bool k4 = type == ember::quant::DType::q4_k;
  // ember's groups (lib/quant/q4_g.cpp): d, m (fp16), then the codes, 16 bytes per 32 values.
  const bool group = type == ember::quant::DType::q4_g128 || type == ember::quant::DType::q4_g64;
  const size_t width = k4 ? 256 : type == ember::quant::DType::q4_g128 ? 128 : type == ember::quant::DType::q4_g64 ? 64 : 32;
  const size_t block_bytes = k4 ? sizeof(ember::quant::BlockQ4_K) : group ? 4 + width / 2 : sizeof(ember::quant::BlockQ4_0);
  std::vector<double> w(weights.begin(), weights.end());
  const ReferenceFactor f = reference_factor(std::move(h), w, rows, cols, damp, act_order);
  const Matrix& li = f.li;   // H^-1 = Li Li^T, so U = Li^T
  const std::vector<size_t>& order = f.order;
  std::vector<size_t> position(cols);
  for (size_t k = 0; k < cols; ++k) position[order[k]] = k;
  std::vector<std::byte> out(rows * cols / width * block_bytes);
  for (size_t r = 0; r < rows; ++r) {
    std::vector<double> wp(cols);   // row r in the order of quantization
    for (size_t k = 0; k < cols; ++k) wp[k] = w[r * cols + order[k]];
    std::vector<bool> started(cols / width, false);
    std::vector<float> inv_d(cols / width), values(width);
    for (size_t k = 0; k < cols; ++k) {
      const size_t c = order[k], block = c / width, i = c % width;
      std::byte* b = out.data() + (r * cols / width + block) * block_bytes;
      if (!started[block]) {
        started[block] = true;
        for (size_t m = 0; m < width; ++m) values[m] = float(wp[position[block * width + m]]);
        if (k4) {
          ember::quantize::quantize_q4_k_searched(values.data(), b, 256);
        } else if (group) {
          // m = the smallest value, d = (largest - smallest) / 15, both stored as fp16.
          float lo = values[0], hi = values[0];
          for (float v : values) lo = std::min(lo, v), hi = std::max(hi, v);
          const uint16_t d = ember::fp32_to_fp16((hi - lo) / 15.0f), m = ember::fp32_to_fp16(lo);
          std::memcpy(b, &d, 2);
          std::memcpy(b + 2, &m, 2);
          std::memset(b + 4, 0, width / 2);
        } else {
          auto& q = *reinterpret_cast<ember::quant::BlockQ4_0*>(b);
          float amax = 0, max = 0;
          for (float v : values)
            if (amax < std::fabs(v)) amax = std::fabs(v), max = v;
          const float d = max / -8;
          inv_d[block] = d != 0 ? 1.0f / d : 0.0f;
          q.d = ember::fp32_to_fp16(d);
          std::memset(q.qs, 0, sizeof q.qs);
        }
      }
      const float x = float(wp[k]);
      double dequantized;
      if (k4) {
        auto& q = *reinterpret_cast<ember::quant::BlockQ4_K*>(b);
        const int sub = int(i / 32);
        int sc, mn;
        k_scale_min(q.scales, sub, sc, mn);
        const float step = ember::fp16_to_fp32(q.d) * float(sc), offset = ember::fp16_to_fp32(q.dmin) * float(mn);
        uint8_t& byte = q.qs[32 * (sub / 2) + i % 32];
        const int shift = sub % 2 == 0 ? 0 : 4;
        int code = (byte >> shift) & 15;
        if (step != 0) {
          code = int(std::nearbyint((x + offset) / step));
          code = code < 0 ? 0 : code > 15 ? 15 : code;
          byte = uint8_t((byte & (shift == 0 ? 0xf0 : 0x0f)) | (code << shift));
        }
        volatile float product = step * float(code);   // a reader's two roundings, no fused multiply-add
        dequantized = double(product - offset);
      } else if (group) {
        uint16_t d16, m16;
        std::memcpy(&d16, b, 2);
        std::memcpy(&m16, b + 2, 2);
        const float d = ember::fp16_to_fp32(d16), m = ember::fp16_to_fp32(m16);
        int code = 0;
        if (d != 0) {
          code = int(std::nearbyint((x - m) / d));
          code = code < 0 ? 0 : code > 15 ? 15 : code;
        }
        auto* codes = reinterpret_cast<uint8_t*>(b + 4);
        codes[16 * (i / 32) + i % 16] |= uint8_t(i % 32 < 16 ? code : code << 4);
        volatile float product = d * float(code);
        dequantized = double(product + m);
      } else {
        auto& q = *reinterpret_cast<ember::quant::BlockQ4_0*>(b);
        const float t = x * inv_d[block] + 8.5f;
        const int code = t <= 0 ? 0 : t >= 15 ? 15 : int(t);
        q.qs[i % 16] |= uint8_t(code << (i < 16 ? 0 : 4));
        dequantized = double(float(code - 8) * ember::fp16_to_fp32(q.d));
      }
      const double e = (wp[k] - dequantized) / li[k][k];
      for (size_t m = k + 1; m < cols; ++m) wp[m] -= e * li[m][k];
    }
  }
  return out;
}

// The paper's algorithm onto Q4_1, Q5_0, Q5_1, Q8_0, Q8_W, Q5_K and Q6_K, returning the
// values a reader dequantizes (not bytes: the packing is the readers' business, and
// the test decodes the fast implementation's bytes with lib/quant's dequantizers). The
// grids, from llama.cpp's reference rules (ggml-quants.c quantize_row_*_ref) and the
// file rule for Q8_0 weights, Q8_W's one scale per row (max |w| / 127 of the row as it
// stands before its first column is quantized); the K types' grids from ember's searched quantizers
// (llama-quantize's bytes), each value then recoded on the stored fp16/6-bit grid.
std::vector<float> reference_gptq_values(ember::quant::DType type, const std::vector<float>& weights, size_t rows, size_t cols,
                                         const Matrix& h, double damp, bool act_order) {
  using ember::quant::DType;
  const bool k_type = type == DType::q5_k || type == DType::q6_k;
  // Q8_W: one grid for the whole row, from its values before any column is quantized.
  const size_t width = k_type ? 256 : type == DType::q8_w ? cols : 32;
  std::vector<double> w(weights.begin(), weights.end());
  const ReferenceFactor f = reference_factor(h, w, rows, cols, damp, act_order);
  std::vector<size_t> position(cols);
  for (size_t k = 0; k < cols; ++k) position[f.order[k]] = k;
  std::vector<float> out(rows * cols);
  // A block's grid: for the 32-value types the unrounded d (inverse) and minimum and
  // the stored fp16 d and m; for the K types the steps and offsets of its sub-blocks.
  struct Grid {
    float inv = 0, lo = 0, d16 = 0, m16 = 0;
    float step[16] = {}, offset[16] = {};
  };
  for (size_t r = 0; r < rows; ++r) {
    std::vector<double> wp(cols);
    for (size_t k = 0; k < cols; ++k) wp[k] = w[r * cols + f.order[k]];
    std::vector<Grid> grids(cols / width);
    std::vector<bool> started(cols / width, false);
    std::vector<float> values(width);
    for (size_t k = 0; k < cols; ++k) {
      const size_t c = f.order[k], block = c / width, i = c % width;
      Grid& g = grids[block];
      if (!started[block]) {
        started[block] = true;
        for (size_t m = 0; m < width; ++m) values[m] = float(wp[position[block * width + m]]);
        if (type == DType::q4_1 || type == DType::q5_1) {
          float lo = values[0], hi = values[0];
          for (float v : values) lo = std::min(lo, v), hi = std::max(hi, v);
          const float d = (hi - lo) / (type == DType::q4_1 ? 15.0f : 31.0f);
          g.inv = d != 0 ? 1.0f / d : 0.0f;
          g.lo = lo;
          g.d16 = ember::fp16_to_fp32(ember::fp32_to_fp16(d));
          g.m16 = ember::fp16_to_fp32(ember::fp32_to_fp16(lo));
        } else if (type == DType::q5_0) {
          float amax = 0, max = 0;
          for (float v : values)
            if (amax < std::fabs(v)) amax = std::fabs(v), max = v;
          const float d = max / -16;
          g.inv = d != 0 ? 1.0f / d : 0.0f;
          g.d16 = ember::fp16_to_fp32(ember::fp32_to_fp16(d));
        } else if (type == DType::q8_0) {
          float amax = 0;
          for (float v : values) amax = std::max(amax, std::fabs(v));
          const float d = amax / 127;
          g.inv = d != 0 ? 1.0f / d : 0.0f;
          g.d16 = ember::fp16_to_fp32(ember::fp32_to_fp16(d));
        } else if (type == DType::q8_w) {
          float amax = 0;
          for (float v : values) amax = std::max(amax, std::fabs(v));
          g.inv = amax != 0 ? 127.0f / amax : 0.0f;
          g.d16 = ember::fp16_to_fp32(ember::fp32_to_fp16(amax / 127.0f));
        } else if (type == DType::q5_k) {
          ember::quant::BlockQ5_K b;
          ember::quantize::quantize_q5_k_searched(values.data(), &b, 256);
          for (int j = 0; j < 8; ++j) {
            int sc, mn;
            k_scale_min(b.scales, j, sc, mn);
            g.step[j] = ember::fp16_to_fp32(b.d) * float(sc);
            g.offset[j] = ember::fp16_to_fp32(b.dmin) * float(mn);
          }
        } else {
          ember::quant::BlockQ6_K b;
          ember::quantize::quantize_q6_k_searched(values.data(), &b, 256);
          for (int j = 0; j < 16; ++j) g.step[j] = ember::fp16_to_fp32(b.d) * float(b.scales[j]);
        }
      }
      const float x = float(wp[k]);
      float value;
      if (type == DType::q4_1 || type == DType::q5_1) {
        const int top = type == DType::q4_1 ? 15 : 31;
        const float t = (x - g.lo) * g.inv + 0.5f;
        const int q = t <= 0 ? 0 : t >= float(top) ? top : int(t);
        volatile float product = float(q) * g.d16;
        value = product + g.m16;
      } else if (type == DType::q5_0) {
        const float t = x * g.inv + 16.5f;
        const int q = t <= 0 ? 0 : t >= 31 ? 31 : int(t);
        value = float(q - 16) * g.d16;
      } else if (type == DType::q8_0) {
        const float q = std::min(127.0f, std::max(-127.0f, std::round(x * g.inv)));
        value = g.d16 * q;
      } else if (type == DType::q8_w) {
        const float q = std::min(127.0f, std::max(-127.0f, std::nearbyint(x * g.inv)));   // half to even
        value = g.d16 * q;
      } else if (type == DType::q5_k) {
        // A sub-block whose step is 0 dequantizes to -offset whatever its codes.
        const int j = int(i / 32);
        const int q = g.step[j] != 0 ? std::clamp(int(std::nearbyint((x + g.offset[j]) / g.step[j])), 0, 31) : 0;
        volatile float product = g.step[j] * float(q);
        value = product - g.offset[j];
      } else {
        const int j = int(i / 16);
        const int q = g.step[j] != 0 ? std::clamp(int(std::nearbyint(x / g.step[j])), -32, 31) : 0;
        value = g.step[j] * float(q);
      }
      out[r * cols + c] = value;
      const double e = (wp[k] - double(value)) / f.li[k][k];
      for (size_t m = k + 1; m < cols; ++m) wp[m] -= e * f.li[m][k];
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

// ||X W^T - X W_hat^T||^2 = sum over inputs x of ||W x - W_hat x||^2, W_hat the
// dequantized rows of `type`.
double output_error(ember::quant::DType type, const std::vector<float>& x, size_t n, const std::vector<float>& w,
                    const std::vector<std::byte>& q, size_t rows, size_t cols) {
  std::vector<float> deq(rows * cols);
  const size_t row_bytes = ember::quant::row_bytes(type, int64_t(cols));
  for (size_t r = 0; r < rows; ++r)
    ember::quant::dequantize_row(type, q.data() + r * row_bytes, deq.data() + r * cols, int64_t(cols));
  double total = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t r = 0; r < rows; ++r) {
      double e = 0;
      for (size_t c = 0; c < cols; ++c) e += (double(w[r * cols + c]) - deq[r * cols + c]) * x[i * cols + c];
      total += e * e;
    }
  return total;
}

using ember::quant::DType;
using ember::quantize::gptq_quantize;

std::vector<std::byte> run_gptq(DType type, const std::vector<float>& w, size_t rows, size_t cols, const Matrix& h,
                                ember::quantize::GptqOptions options) {
  std::vector<std::byte> out(rows * ember::quant::row_bytes(type, int64_t(cols)));
  gptq_quantize(type, w.data(), int64_t(rows), int64_t(cols), flat(h).data(), out.data(), options);
  return out;
}

// Round-to-nearest as `ember quantize` writes it (llama-quantize's bytes).
// Row by row, as a file's rows are quantized (Q8_W's scale is per call).
std::vector<std::byte> run_rtn(DType type, const std::vector<float>& w, size_t rows, size_t cols) {
  const size_t row_bytes = ember::quant::row_bytes(type, int64_t(cols));
  std::vector<std::byte> out(rows * row_bytes);
  for (size_t r = 0; r < rows; ++r)
    ember::quantize::quantize_values(type, w.data() + r * cols, out.data() + r * row_bytes, int64_t(cols));
  return out;
}

}  // namespace

TEST_CASE("GPTQ Q4_0 bytes equal the scalar reference's", "[quantize][gptq]") {
  std::mt19937 rng(1234);
  const size_t rows = 12, cols = 192;   // two lazy batches of 128 columns, the second partial
  const Synthetic s = synthetic_inputs(400, cols, rng, 37);   // column 37 is dead
  const std::vector<float> w = random_weights(rows, cols, rng);
  for (bool act_order : {false, true}) {
    INFO("act_order " << act_order);
    const std::vector<std::byte> expected = reference_gptq(DType::q4_0, w, rows, cols, s.h, 0.01, act_order);
    for (int64_t block_columns : {32, 96, 128, 256}) {
      INFO("block_columns " << block_columns);
      CHECK(run_gptq(DType::q4_0, w, rows, cols, s.h, {.damp = 0.01, .block_columns = block_columns, .act_order = act_order}) ==
            expected);
    }
    // And not round-to-nearest's bytes.
    CHECK(run_rtn(DType::q4_0, w, rows, cols) != expected);
  }
  CHECK(reference_gptq(DType::q4_0, w, rows, cols, s.h, 0.01, false) !=
        reference_gptq(DType::q4_0, w, rows, cols, s.h, 0.01, true));
}

TEST_CASE("GPTQ Q4_K bytes equal the scalar reference's, with and without act-order", "[quantize][gptq]") {
  std::mt19937 rng(4321);
  const size_t rows = 6, cols = 512;   // two super-blocks
  const Synthetic s = synthetic_inputs(700, cols, rng, 300);   // column 300 is dead
  const std::vector<float> w = random_weights(rows, cols, rng);
  std::vector<std::byte> plain;
  for (bool act_order : {false, true}) {
    INFO("act_order " << act_order);
    const std::vector<std::byte> expected = reference_gptq(DType::q4_k, w, rows, cols, s.h, 0.01, act_order);
    // 96 and 160: super-blocks (and, with act-order, their first columns) start inside a batch.
    for (int64_t block_columns : {32, 96, 128, 160, 512}) {
      INFO("block_columns " << block_columns);
      CHECK(run_gptq(DType::q4_k, w, rows, cols, s.h, {.damp = 0.01, .block_columns = block_columns, .act_order = act_order}) ==
            expected);
    }
    CHECK(run_rtn(DType::q4_k, w, rows, cols) != expected);
    if (act_order)
      CHECK(expected != plain);
    else
      plain = expected;
  }
}

TEST_CASE("GPTQ Q4_G128 and Q4_G64 bytes equal the scalar reference's, with and without act-order",
          "[quantize][gptq]") {
  std::mt19937 rng(2468);
  const size_t rows = 7, cols = 384;   // three groups of 128, six of 64
  const Synthetic s = synthetic_inputs(600, cols, rng, 100);   // column 100 is dead
  const std::vector<float> w = random_weights(rows, cols, rng);
  for (DType type : {DType::q4_g128, DType::q4_g64})
    for (bool act_order : {false, true}) {
      INFO(ember::quant::type_name(type) << " act_order " << act_order);
      const std::vector<std::byte> expected = reference_gptq(type, w, rows, cols, s.h, 0.01, act_order);
      for (int64_t block_columns : {32, 96, 128, 384}) {
        INFO("block_columns " << block_columns);
        CHECK(run_gptq(type, w, rows, cols, s.h, {.damp = 0.01, .block_columns = block_columns, .act_order = act_order}) ==
              expected);
      }
      CHECK(run_rtn(type, w, rows, cols) != expected);
    }
}

TEST_CASE("GPTQ onto Q4_1, Q5_0, Q5_1, Q8_0, Q8_W, Q5_K and Q6_K: values equal the scalar reference's",
          "[quantize][gptq]") {
  std::mt19937 rng(1357);
  const size_t rows = 5, cols = 512;   // 16 blocks of 32, two super-blocks
  const Synthetic s = synthetic_inputs(700, cols, rng, 77);   // column 77 is dead
  const std::vector<float> w = random_weights(rows, cols, rng);
  for (DType type : {DType::q4_1, DType::q5_0, DType::q5_1, DType::q8_0, DType::q8_w, DType::q5_k, DType::q6_k})
    for (bool act_order : {false, true}) {
      INFO(ember::quant::type_name(type) << " act_order " << act_order);
      const std::vector<float> expected = reference_gptq_values(type, w, rows, cols, s.h, 0.01, act_order);
      for (int64_t block_columns : {32, 96, 512}) {
        INFO("block_columns " << block_columns);
        const std::vector<std::byte> q =
            run_gptq(type, w, rows, cols, s.h, {.damp = 0.01, .block_columns = block_columns, .act_order = act_order});
        std::vector<float> back(rows * cols);
        ember::quant::dequantize_row(type, q.data(), back.data(), int64_t(rows * cols));
        size_t differ = 0;
        for (size_t i = 0; i < back.size(); ++i) differ += back[i] != expected[i];
        CHECK(differ == 0);
      }
      CHECK(run_rtn(type, w, rows, cols) != run_gptq(type, w, rows, cols, s.h, {.act_order = act_order}));
    }
}

TEST_CASE("GPTQ's bytes do not depend on the thread count", "[quantize][gptq]") {
  std::mt19937 rng(8642);
  const size_t rows = 150, cols = 256;   // three chunks of rows, the last partial
  const Synthetic s = synthetic_inputs(400, cols, rng, 9);
  const std::vector<float> w = random_weights(rows, cols, rng);
  for (DType type : {DType::q4_0, DType::q5_1, DType::q6_k, DType::q4_k}) {
    INFO(ember::quant::type_name(type));
    const std::vector<std::byte> one = run_gptq(type, w, rows, cols, s.h, {.threads = 1});
    CHECK(run_gptq(type, w, rows, cols, s.h, {.threads = 2}) == one);
    CHECK(run_gptq(type, w, rows, cols, s.h, {.threads = 5}) == one);
    // Each row on its own gives the same bytes: rows are independent given H.
    const size_t row_bytes = ember::quant::row_bytes(type, int64_t(cols));
    const std::vector<float> last(w.end() - std::ptrdiff_t(cols), w.end());
    const std::vector<std::byte> alone = run_gptq(type, last, 1, cols, s.h, {});
    CHECK(std::equal(alone.begin(), alone.end(), one.end() - std::ptrdiff_t(row_bytes)));
  }
}

TEST_CASE("GPTQ with a diagonal Hessian is round-to-nearest, byte for byte", "[quantize][gptq]") {
  // No error reaches another column, so each block's grid and codes are those of the
  // values as given: llama-quantize's rounding, whatever the order.
  std::mt19937 rng(7);
  const size_t rows = 5, cols = 512;
  const std::vector<float> w = random_weights(rows, cols, rng);
  Matrix h(cols, std::vector<double>(cols, 0.0));
  std::uniform_real_distribution<double> diag(0.1, 10.0);
  for (size_t i = 0; i < cols; ++i) h[i][i] = diag(rng);
  for (DType type : {DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q8_0, DType::q4_k, DType::q5_k,
                     DType::q6_k, DType::q4_g128, DType::q4_g64, DType::q8_w})
    for (bool act_order : {false, true}) {
      INFO(ember::quant::type_name(type) << " act_order " << act_order);
      CHECK(run_gptq(type, w, rows, cols, h, {.act_order = act_order}) == run_rtn(type, w, rows, cols));
    }
}

TEST_CASE("GPTQ's output error on the calibration inputs is below round-to-nearest's", "[quantize][gptq]") {
  struct Case {
    DType type;
    size_t cols;
    double ratio;   // the most GPTQ's error may be, as a share of round-to-nearest's
  };
  for (const Case c : {Case{DType::q4_0, 128, 0.7}, Case{DType::q4_k, 512, 0.7}, Case{DType::q4_g128, 256, 0.7},
                       Case{DType::q4_1, 128, 0.7}, Case{DType::q5_0, 128, 0.7}, Case{DType::q5_1, 128, 0.7},
                       Case{DType::q8_0, 128, 0.7}, Case{DType::q5_k, 512, 0.7}, Case{DType::q6_k, 256, 0.7},
                       Case{DType::q8_w, 256, 0.7}})
    for (bool act_order : {false, true}) {
      INFO(ember::quant::type_name(c.type) << " act_order " << act_order);
      std::mt19937 rng(99);
      const size_t rows = 64, n = 600;
      const Synthetic s = synthetic_inputs(n, c.cols, rng, c.cols);   // no dead column
      const std::vector<float> w = random_weights(rows, c.cols, rng);
      const double e_gptq = output_error(c.type, s.x, n, w, run_gptq(c.type, w, rows, c.cols, s.h, {.act_order = act_order}),
                                         rows, c.cols);
      const double e_rtn = output_error(c.type, s.x, n, w, run_rtn(c.type, w, rows, c.cols), rows, c.cols);
      INFO("output error: gptq " << e_gptq << ", rtn " << e_rtn << ", ratio " << e_gptq / e_rtn);
      CHECK(e_gptq < c.ratio * e_rtn);
    }
}

TEST_CASE("GPTQ rejects bad sizes, types, options and values", "[quantize][gptq]") {
  std::vector<float> w(2 * 512, 0.1f);
  std::vector<double> h(64 * 64, 0.0);
  for (size_t i = 0; i < 64; ++i) h[i * 64 + i] = 1.0;
  std::vector<std::byte> out(2 * 2 * sizeof(ember::quant::BlockQ4_K));
  expect_error([&] { gptq_quantize(DType::q4_0, w.data(), 2, 48, h.data(), out.data()); }, ErrorCode::invalid_argument,
               "multiple of 32");
  expect_error([&] { gptq_quantize(DType::q4_k, w.data(), 2, 64, h.data(), out.data()); }, ErrorCode::invalid_argument,
               "multiple of 256");
  expect_error([&] { gptq_quantize(DType::bf16, w.data(), 2, 256, h.data(), out.data()); }, ErrorCode::unsupported,
               "Q4_G64 and Q8_W, not BF16");
  expect_error([&] { gptq_quantize(DType::f16, w.data(), 2, 64, h.data(), out.data()); }, ErrorCode::unsupported,
               "not F16");
  expect_error([&] { gptq_quantize(DType::q5_k, w.data(), 2, 64, h.data(), out.data()); }, ErrorCode::invalid_argument,
               "multiple of 256");
  expect_error([&] { gptq_quantize(DType::q4_0, w.data(), 2, 64, h.data(), out.data(), {.threads = 0}); },
               ErrorCode::invalid_argument, "threads is 0");
  expect_error([&] { gptq_quantize(DType::q4_0, w.data(), 2, 64, h.data(), out.data(), {.damp = 0}); },
               ErrorCode::invalid_argument, "damp is 0");
  expect_error([&] { gptq_quantize(DType::q4_0, w.data(), 2, 64, h.data(), out.data(), {.block_columns = 48}); },
               ErrorCode::invalid_argument, "block_columns is 48");
  h[5] = std::nan("");
  expect_error([&] { gptq_quantize(DType::q4_0, w.data(), 2, 64, h.data(), out.data()); }, ErrorCode::malformed_file,
               "non-finite");
  h[5] = 0.0;
  w[3] = INFINITY;
  expect_error([&] { gptq_quantize(DType::q4_0, w.data(), 2, 64, h.data(), out.data(), {.act_order = true}); },
               ErrorCode::malformed_file, "not finite");
  // An all-dead Hessian (an input that is always zero) is no error: every weight is 0.
  w[3] = 0.1f;
  std::fill(h.begin(), h.end(), 0.0);
  gptq_quantize(DType::q4_0, w.data(), 2, 64, h.data(), out.data());
  std::vector<float> back(128);
  ember::quant::dequantize_row(DType::q4_0, out.data(), back.data(), 128);
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
  EMBER_SKIP_IF_MISSING(llama_f16());
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

TEST_CASE("quantize --type Q4_K_M --method gptq: GPTQ for the calibrated projections (Q4_K and Q6_K alike)",
          "[quantize][gptq]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("q4_k_m");
  write_text(dir / "calib.txt", 40);
  ember::QuantizeOptions rtn_options;
  rtn_options.recipe = ember::QuantRecipe::q4_k_m;
  ember::quantize_model(llama_f16().string(), (dir / "rtn.gguf").string(), rtn_options);
  const ember::gguf::File b = ember::gguf::File::open(dir / "rtn.gguf");
  std::vector<std::vector<std::byte>> gptq_bytes(2);
  for (bool act_order : {false, true}) {
    INFO("act_order " << act_order);
    ember::QuantizeOptions options = gptq_options(dir / "calib.txt", 8, 64);
    options.recipe = ember::QuantRecipe::q4_k_m;
    options.act_order = act_order;
    const fs::path out = dir / (act_order ? "gptq_act.gguf" : "gptq.gguf");
    const ember::QuantizeReport gptq = ember::quantize_model(llama_f16().string(), out.string(), options);
    const ember::gguf::File a = ember::gguf::File::open(out);
    REQUIRE(a.tensors().size() == b.tensors().size());
    size_t n_gptq = 0, n_q6_k = 0;
    for (size_t i = 0; i < a.tensors().size(); ++i) {
      const auto &ta = a.tensors()[i], &tb = b.tensors()[i];
      INFO(ta.name);
      CHECK(ta.type == tb.type);   // the mixture's types, as round-to-nearest plans them
      REQUIRE(ta.n_bytes == tb.n_bytes);
      const bool same = std::memcmp(ta.data, tb.data, ta.n_bytes) == 0;
      const bool projection = ta.name.find("attn_") != std::string::npos || ta.name.find("ffn_") != std::string::npos;
      const bool quantized = ta.type == ember::quant::DType::q4_k || ta.type == ember::quant::DType::q6_k;
      if (projection && ta.type == ember::quant::DType::q6_k) ++n_q6_k;
      CHECK(gptq.tensors[i].gptq == (projection && quantized && ta.shape.size() == 2));
      if (gptq.tensors[i].gptq) {
        ++n_gptq;
        CHECK_FALSE(same);
        const auto* data = reinterpret_cast<const std::byte*>(ta.data);
        gptq_bytes[act_order].insert(gptq_bytes[act_order].end(), data, data + ta.n_bytes);
      } else {
        CHECK(same);   // the output, embeddings, norms: round-to-nearest's bytes
      }
    }
    CHECK(n_gptq >= 7);
    CHECK(n_q6_k >= 1);   // the mixture's wider layers are there, and GPTQ's too
  }
  CHECK(gptq_bytes[0] != gptq_bytes[1]);   // act-order changes the result
  fs::remove_all(dir);
}

TEST_CASE("quantize --type Q5_K_M and Q8_0 --method gptq: the same file on 1 and 3 threads", "[quantize][gptq]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = scratch("threads");
  write_text(dir / "calib.txt", 40);
  for (const auto recipe : {ember::QuantRecipe::q5_k_m, ember::QuantRecipe::q8_0}) {
    std::vector<std::vector<char>> files;
    for (int threads : {1, 3}) {
      ember::QuantizeOptions options = gptq_options(dir / "calib.txt", 4, 64);
      options.recipe = recipe;
      options.threads = threads;
      // No gate: its perplexities come from forward passes on `threads` threads, and
      // the file records them.
      options.max_ppl_rise = 0;
      fs::path out = dir / "t";
      out += std::to_string(threads) + ".gguf";  // (GCC 12 warns, -Wrestrict, on "t" + std::string)
      const ember::QuantizeReport report = ember::quantize_model(llama_f16().string(), out.string(), options);
      size_t n_gptq = 0;
      for (const auto& t : report.tensors) n_gptq += t.gptq;
      CHECK(n_gptq >= 7);
      std::ifstream in(out, std::ios::binary);
      files.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    INFO(ember::quant::type_name(recipe == ember::QuantRecipe::q8_0 ? ember::quant::DType::q8_0 : ember::quant::DType::q5_k));
    CHECK(files[0].size() == files[1].size());
    const bool same = files[0] == files[1];   // not CHECK(a == b): Catch would print both files
    CHECK(same);
  }
  fs::remove_all(dir);
}

TEST_CASE("quantize --method gptq: bad input is a typed error and leaves no output", "[quantize][gptq]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
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
  SECTION("act-order without GPTQ") {
    ember::QuantizeOptions options;
    options.recipe = ember::QuantRecipe::q4_k_m;
    options.act_order = true;
    expect_error([&] { run(options); }, ErrorCode::invalid_argument, "act_order (--act-order) is used by --method gptq only");
    options = gptq_options(dir / "calib.txt", 4, 64);
    options.method = ember::QuantMethod::awq;
    options.act_order = true;
    expect_error([&] { run(options); }, ErrorCode::invalid_argument, "act_order (--act-order) is used by --method gptq only");
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
