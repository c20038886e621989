// GPTQ onto the Q4_0, Q4_K, Q4_G128 and Q4_G64 grids (gptq.hpp).
#include "quantize/gptq.hpp"

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/fail.hpp"
#include "quant/blocks.hpp"
#include "quant/formats.hpp"
#include "quantize/k_search.hpp"

namespace ember::quantize {
namespace {

using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;   // column-major

// ---- The grids: choose a block's grid from its values, code one value on it ----

// llama.cpp's Q4_0 (quantize_row_q4_0_ref) with the scale of each (row, block) kept
// unrounded, as that rule divides by it before it is stored as fp16.
class GridQ4_0 {
 public:
  static constexpr int64_t kWidth = quant::kQK;   // 32 columns per block

  GridQ4_0(void* dst, int64_t rows, int64_t cols)
      : blocks_(static_cast<quant::BlockQ4_0*>(dst)), per_row_(cols / kWidth), inv_scale_(size_t(rows * per_row_)) {}

  // Row r's block b from its values x[0, 32): the scale is the value of largest
  // magnitude (the first one on ties) divided by -8; the codes are cleared.
  void start(int64_t r, int64_t b, const float* x) {
    float amax = 0.0f, max = 0.0f;
    for (int64_t j = 0; j < kWidth; ++j)
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    const float d = max / -8;
    inv_scale_[size_t(r * per_row_ + b)] = d != 0.0f ? 1.0f / d : 0.0f;
    quant::BlockQ4_0& out = blocks_[r * per_row_ + b];
    out.d = fp32_to_fp16(d);
    std::memset(out.qs, 0, sizeof out.qs);
  }

  // Codes row r's value x of column c; returns the value a reader dequantizes.
  double code(int64_t r, int64_t c, float x) {
    const int64_t b = c / kWidth, i = c % kWidth;
    quant::BlockQ4_0& out = blocks_[r * per_row_ + b];
    // llama.cpp's level min(15, (int8)(x / d + 8.5)), clamped to [0, 15] as well: a
    // value updated after its block's scale was chosen can lie outside [-8, 8] (where
    // the C cast would be undefined or negative).
    const float t = x * inv_scale_[size_t(r * per_row_ + b)] + 8.5f;
    const int q = !(t > 0.0f) ? 0 : t >= 15.0f ? 15 : int(t);
    out.qs[i % 16] |= uint8_t(q << (i < 16 ? 0 : 4));
    return double(float(q - 8) * fp16_to_fp32(out.d));
  }

 private:
  quant::BlockQ4_0* blocks_;
  int64_t per_row_;
  std::vector<float> inv_scale_;   // [rows][blocks]: 1 / d, 0 for d = 0
};

// Q4_K: the grid (and the codes of the block as it stood) of the searched quantizer;
// each value is then recoded on that grid as the searched quantizer's last step does.
class GridQ4_K {
 public:
  static constexpr int64_t kWidth = quant::kQKK;   // 256 columns per super-block

  GridQ4_K(void* dst, int64_t, int64_t cols) : blocks_(static_cast<quant::BlockQ4_K*>(dst)), per_row_(cols / kWidth) {}

  void start(int64_t r, int64_t b, const float* x) { quantize_q4_k_searched(x, &blocks_[r * per_row_ + b], kWidth); }

  double code(int64_t r, int64_t c, float x) {
    quant::BlockQ4_K& blk = blocks_[r * per_row_ + c / kWidth];
    const int64_t i = c % kWidth;
    const int sub = int(i / 32);
    const quant::KScales k = quant::unpack_k_scales(blk.scales);
    const float step = quant::load_fp16(blk.d) * float(k.sc[sub]), offset = quant::load_fp16(blk.dmin) * float(k.mn[sub]);
    uint8_t& byte = blk.qs[32 * (sub / 2) + i % 32];
    const int shift = 4 * (sub % 2);
    int q = (byte >> shift) & 15;   // kept where the step is 0 (the value is -offset whatever q is)
    if (step != 0) {
      q = std::clamp(int(std::nearbyint((x + offset) / step)), 0, 15);
      byte = uint8_t((byte & ~(15 << shift)) | (q << shift));
    }
    return double(quant::mul_then_add(step, float(q), -offset));
  }

 private:
  quant::BlockQ4_K* blocks_;
  int64_t per_row_;
};

// Q4_G128 / Q4_G64 (lib/quant/q4_g.cpp): the group's grid is the round-to-nearest
// quantizer's (m = fp16(min), d = fp16((max - min) / 15) of the group's values); each
// value then gets q = clamp(round-half-even((w - m) / d), 0, 15), dequantized d * q + m.
template <int64_t G>
class GridQ4G {
 public:
  static constexpr int64_t kWidth = G;
  static constexpr size_t kBlockBytes = 4 + G / 2;

  GridQ4G(void* dst, int64_t, int64_t cols) : bytes_(static_cast<uint8_t*>(dst)), per_row_(cols / kWidth) {}

  void start(int64_t r, int64_t b, const float* x) {
    uint8_t* blk = block(r, b);
    if (G == 128)
      quant::ref::quantize_q4_g128(x, blk, kWidth);
    else
      quant::ref::quantize_q4_g64(x, blk, kWidth);
    std::memset(blk + 4, 0, G / 2);
  }

  double code(int64_t r, int64_t c, float x) {
    uint8_t* blk = block(r, c / kWidth);
    const int64_t i = c % kWidth;
    uint16_t d16, m16;
    std::memcpy(&d16, blk, 2);
    std::memcpy(&m16, blk + 2, 2);
    const float d = fp16_to_fp32(d16), m = fp16_to_fp32(m16);
    const int q = d != 0.0f ? int(std::clamp(std::nearbyint((x - m) / d), 0.0f, 15.0f)) : 0;
    blk[4 + 16 * (i / 32) + i % 16] |= uint8_t((i % 32) < 16 ? q : q << 4);
    return double(quant::mul_then_add(float(q), d, m));
  }

 private:
  uint8_t* block(int64_t r, int64_t b) { return bytes_ + size_t(r * per_row_ + b) * kBlockBytes; }
  uint8_t* bytes_;
  int64_t per_row_;
};

// ---- The Hessian ----

struct Factor {
  MatrixD u;                     // upper Cholesky factor of the permuted, damped H^-1
  std::vector<int64_t> order;    // order[k]: the original column quantized k-th
  std::vector<bool> dead;        // by original column
};

Factor factor_hessian(const double* hessian, int64_t cols, const GptqOptions& options) {
  MatrixD h(cols, cols);
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const double v = hessian[i * cols + j];
      if (!std::isfinite(v)) fail(ErrorCode::malformed_file, "gptq: the Hessian holds a non-finite value at ({}, {})", i, j);
      h(i, j) = v;
    }
  Factor f;
  f.dead.assign(size_t(cols), false);
  double mean_diag = 0;
  for (int64_t i = 0; i < cols; ++i) {
    if (h(i, i) <= 0) {
      f.dead[size_t(i)] = true;
      h.row(i).setZero();
      h.col(i).setZero();
      h(i, i) = 1;
    }
    mean_diag += h(i, i);
  }
  mean_diag /= double(cols);
  f.order.resize(size_t(cols));
  std::iota(f.order.begin(), f.order.end(), int64_t(0));
  if (options.act_order) {
    std::stable_sort(f.order.begin(), f.order.end(), [&](int64_t a, int64_t b) { return h(a, a) > h(b, b); });
    MatrixD permuted(cols, cols);
    for (int64_t a = 0; a < cols; ++a)
      for (int64_t b = 0; b < cols; ++b) permuted(a, b) = h(f.order[size_t(a)], f.order[size_t(b)]);
    h = std::move(permuted);
  }
  h.diagonal().array() += options.damp * mean_diag;
  Eigen::LLT<MatrixD> llt(h);
  if (llt.info() != Eigen::Success)
    fail(ErrorCode::invalid_argument, "gptq: the damped Hessian is not positive definite (is it symmetric?)");
  const MatrixD inverse = llt.solve(MatrixD::Identity(cols, cols));
  Eigen::LLT<MatrixD> llt_inverse(inverse);
  if (llt_inverse.info() != Eigen::Success)
    fail(ErrorCode::invalid_argument, "gptq: the inverse Hessian is not positive definite");
  f.u = llt_inverse.matrixU();
  return f;
}

// ---- The column loop ----

template <class Grid>
void run_gptq(const float* weights, int64_t rows, int64_t cols, const double* hessian, void* dst,
              const GptqOptions& options) {
  constexpr int64_t kWidth = Grid::kWidth;
  require(cols % kWidth == 0, "gptq: {} x {} weights: the row length must be a positive multiple of {}", rows, cols, kWidth);
  if (rows == 0) return;
  const Factor f = factor_hessian(hessian, cols, options);
  const MatrixD& u = f.u;
  std::vector<int64_t> position(static_cast<size_t>(cols));   // position[c]: where column c is quantized
  for (int64_t k = 0; k < cols; ++k) position[size_t(f.order[size_t(k)])] = k;

  MatrixD w(rows, cols);   // permuted, column-major: one column's update runs over contiguous rows
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = weights[r * cols + c];
      if (!std::isfinite(v)) fail(ErrorCode::malformed_file, "gptq: weight ({}, {}) is not finite ({})", r, c, v);
      w(r, position[size_t(c)]) = f.dead[size_t(c)] ? 0.0 : double(v);
    }

  Grid grid(dst, rows, cols);
  std::vector<bool> started(static_cast<size_t>(cols / kWidth), false);
  Eigen::MatrixXf current(kWidth, rows);   // a block's current values, one row's per column of this matrix
  MatrixD err(rows, options.block_columns);

  for (int64_t b0 = 0; b0 < cols; b0 += options.block_columns) {
    const int64_t b1 = std::min(cols, b0 + options.block_columns);
    for (int64_t j = b0; j < b1; ++j) {
      const int64_t c = f.order[size_t(j)], block = c / kWidth;
      if (!started[size_t(block)]) {
        // The block's columns, all still to be quantized: those in this batch are up to
        // date, those after it lack the updates of this batch's columns so far.
        started[size_t(block)] = true;
        for (int64_t k = 0; k < kWidth; ++k) {
          const int64_t p = position[size_t(block * kWidth + k)];
          if (p < b1)
            current.row(k) = w.col(p).cast<float>().transpose();
          else
            current.row(k) =
                (w.col(p) - err.leftCols(j - b0) * u.block(b0, p, j - b0, 1)).cast<float>().transpose();
        }
        for (int64_t r = 0; r < rows; ++r) grid.start(r, block, current.col(r).data());
      }
      const double diag = u(j, j);
      for (int64_t r = 0; r < rows; ++r) err(r, j - b0) = (w(r, j) - grid.code(r, c, float(w(r, j)))) / diag;
      // The rest of this batch at once; the columns after it once per batch.
      for (int64_t k = j + 1; k < b1; ++k) w.col(k).noalias() -= u(j, k) * err.col(j - b0);
    }
    if (b1 < cols)
      w.rightCols(cols - b1).noalias() -= err.leftCols(b1 - b0) * u.block(b0, b1, b1 - b0, cols - b1);
  }
}

}  // namespace

bool gptq_can_write(quant::DType type) {
  return type == quant::DType::q4_0 || type == quant::DType::q4_k || type == quant::DType::q4_g128 ||
         type == quant::DType::q4_g64;
}

void gptq_quantize(quant::DType type, const float* weights, int64_t rows, int64_t cols, const double* hessian, void* dst,
                   const GptqOptions& options) {
  if (!gptq_can_write(type))
    fail(ErrorCode::unsupported, "gptq: writes Q4_0, Q4_K, Q4_G128 and Q4_G64, not {}", quant::type_name(type));
  require(rows >= 0 && cols > 0, "gptq: {} x {} weights: the row length must be a positive multiple of the block", rows,
          cols);
  require(options.damp > 0 && std::isfinite(options.damp), "gptq: damp is {}, must be > 0", options.damp);
  require(options.block_columns > 0 && options.block_columns % quant::kQK == 0,
          "gptq: block_columns is {}, must be a positive multiple of 32", options.block_columns);
  switch (type) {
    case quant::DType::q4_0: return run_gptq<GridQ4_0>(weights, rows, cols, hessian, dst, options);
    case quant::DType::q4_k: return run_gptq<GridQ4_K>(weights, rows, cols, hessian, dst, options);
    case quant::DType::q4_g128: return run_gptq<GridQ4G<128>>(weights, rows, cols, hessian, dst, options);
    default: return run_gptq<GridQ4G<64>>(weights, rows, cols, hessian, dst, options);
  }
}

}  // namespace ember::quantize
