// GPTQ onto the Q4_0 grid (gptq.hpp).
#include "quantize/gptq.hpp"

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/fail.hpp"
#include "quant/blocks.hpp"

namespace ember::quantize {
namespace {

using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;   // column-major

constexpr int64_t kBlock = quant::kQK;   // 32 values per Q4_0 block

// llama.cpp's Q4_0 scale of one block (quantize_row_q4_0_ref): the value of largest
// magnitude (the first one on ties) divided by -8.
float q4_0_scale(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int64_t j = 0; j < kBlock; ++j) {
    const float v = x[j];
    if (amax < std::fabs(v)) {
      amax = std::fabs(v);
      max = v;
    }
  }
  return max / -8;
}

// llama.cpp's level min(15, (int8)(x + 8.5)) for x = w / d; clamped to [0, 15] as
// well, since a column updated after its block's scale was chosen can lie outside
// [-8, 8] (where the C cast would be undefined or negative).
int q4_0_level(float x) {
  const float t = x + 8.5f;
  if (!(t > 0.0f)) return 0;
  if (t >= 15.0f) return 15;
  return int(t);
}

// The upper Cholesky factor U of (H + lambda I)^-1 after the dead-column rule; marks
// the dead columns in `dead`.
MatrixD inverse_cholesky_upper(const double* hessian, int64_t cols, double damp, std::vector<bool>& dead) {
  MatrixD h(cols, cols);
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const double v = hessian[i * cols + j];
      if (!std::isfinite(v)) fail(ErrorCode::malformed_file, "gptq: the Hessian holds a non-finite value at ({}, {})", i, j);
      h(i, j) = v;
    }
  dead.assign(size_t(cols), false);
  double mean_diag = 0;
  for (int64_t i = 0; i < cols; ++i) {
    if (h(i, i) <= 0) {
      dead[size_t(i)] = true;
      h.row(i).setZero();
      h.col(i).setZero();
      h(i, i) = 1;
    }
    mean_diag += h(i, i);
  }
  mean_diag /= double(cols);
  h.diagonal().array() += damp * mean_diag;
  Eigen::LLT<MatrixD> llt(h);
  if (llt.info() != Eigen::Success)
    fail(ErrorCode::invalid_argument, "gptq: the damped Hessian is not positive definite (is it symmetric?)");
  const MatrixD inverse = llt.solve(MatrixD::Identity(cols, cols));
  Eigen::LLT<MatrixD> llt_inverse(inverse);
  if (llt_inverse.info() != Eigen::Success)
    fail(ErrorCode::invalid_argument, "gptq: the inverse Hessian is not positive definite");
  return llt_inverse.matrixU();
}

}  // namespace

void gptq_quantize_q4_0(const float* weights, int64_t rows, int64_t cols, const double* hessian, void* dst,
                        const GptqOptions& options) {
  require(rows >= 0 && cols > 0 && cols % kBlock == 0, "gptq: {} x {} weights: the row length must be a positive multiple of 32",
          rows, cols);
  require(options.damp > 0 && std::isfinite(options.damp), "gptq: damp is {}, must be > 0", options.damp);
  require(options.block_columns > 0 && options.block_columns % kBlock == 0,
          "gptq: block_columns is {}, must be a positive multiple of 32", options.block_columns);
  if (rows == 0) return;

  std::vector<bool> dead;
  const MatrixD u = inverse_cholesky_upper(hessian, cols, options.damp, dead);

  MatrixD w(rows, cols);   // column-major: one column's update runs over contiguous rows
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = weights[r * cols + c];
      if (!std::isfinite(v)) fail(ErrorCode::malformed_file, "gptq: weight ({}, {}) is not finite ({})", r, c, v);
      w(r, c) = dead[size_t(c)] ? 0.0 : double(v);
    }

  auto* blocks = static_cast<quant::BlockQ4_0*>(dst);
  const int64_t blocks_per_row = cols / kBlock;
  std::vector<float> inv_scale(static_cast<size_t>(rows)), scale16(static_cast<size_t>(rows)), block_values(kBlock);
  MatrixD err(rows, options.block_columns);

  for (int64_t b0 = 0; b0 < cols; b0 += options.block_columns) {
    const int64_t b1 = std::min(cols, b0 + options.block_columns);
    for (int64_t j = b0; j < b1; ++j) {
      const int64_t block = j / kBlock, in_block = j % kBlock;
      if (in_block == 0) {
        // Each row's scale, from its block's values as they stand now.
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t k = 0; k < kBlock; ++k) block_values[size_t(k)] = float(w(r, j + k));
          const float d = q4_0_scale(block_values.data());
          inv_scale[size_t(r)] = d != 0.0f ? 1.0f / d : 0.0f;
          quant::BlockQ4_0& out = blocks[r * blocks_per_row + block];
          out.d = fp32_to_fp16(d);
          std::memset(out.qs, 0, sizeof out.qs);
          scale16[size_t(r)] = fp16_to_fp32(out.d);
        }
      }
      const double diag = u(j, j);
      for (int64_t r = 0; r < rows; ++r) {
        const int qi = q4_0_level(float(w(r, j)) * inv_scale[size_t(r)]);
        const double dequantized = double(float(qi - 8) * scale16[size_t(r)]);
        err(r, j - b0) = (w(r, j) - dequantized) / diag;
        quant::BlockQ4_0& out = blocks[r * blocks_per_row + block];
        out.qs[in_block % 16] |= uint8_t(qi << (in_block < 16 ? 0 : 4));
      }
      // The rest of this batch at once; the columns after it once per batch.
      for (int64_t k = j + 1; k < b1; ++k) w.col(k).noalias() -= u(j, k) * err.col(j - b0);
    }
    if (b1 < cols)
      w.rightCols(cols - b1).noalias() -= err.leftCols(b1 - b0) * u.block(b0, b1, b1 - b0, cols - b1);
  }
}

}  // namespace ember::quantize
