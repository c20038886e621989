// GPTQ onto the GGUF block grids, Q4_G128 / Q4_G64 and Q8_W (gptq.hpp).
#include "quantize/gptq.hpp"

#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <vector>

#include "common/fail.hpp"
#include "quant/blocks.hpp"
#include "quant/formats.hpp"
#include "quantize/calibration.hpp"
#include "quantize/k_search.hpp"

namespace ember::quantize {
namespace {

using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic>;   // column-major

// ---- The grids: choose a block's grid from its values, code one value on it ----

// The 32-value types by llama.cpp's reference rules (lib/quant/<type>.cpp,
// weight_quantizers.hpp), with each (row, block)'s unrounded scale and minimum kept, as
// those rules divide by them before they are stored as fp16:
//   Q4_0 / Q5_0 (L = 16 / 32 levels): d = the value of largest magnitude (the first one
//     on ties) / -(L / 2); q = min(L - 1, trunc(x / d + L / 2 + 0.5)); x' = (q - L / 2) d;
//   Q4_1 / Q5_1: m = min, d = (max - min) / (L - 1); q = min(L - 1, trunc((x - m) / d +
//     0.5)); x' = d q + m;
//   Q8_0 (the file rule): d = max |x| / 127, q = round-half-away(x / d); x' = d q.
// A value updated after its block's grid was chosen can fall outside the grid: its code
// is clamped to the levels (to [-127, 127] for Q8_0), where the C casts of the rules
// would be undefined or negative.
template <quant::DType T>
class Grid32 {
 public:
  static constexpr int64_t kWidth = quant::kQK;
  static constexpr bool kQ8 = T == quant::DType::q8_0;
  static constexpr bool kOffset = T == quant::DType::q4_1 || T == quant::DType::q5_1;
  static constexpr bool kFiveBits = T == quant::DType::q5_0 || T == quant::DType::q5_1;
  static constexpr int kLevels = kFiveBits ? 32 : 16;

  Grid32(void* dst, int64_t rows, int64_t cols)
      : bytes_(static_cast<uint8_t*>(dst)),
        per_row_(cols / kWidth),
        inv_scale_(size_t(rows * per_row_)),
        min_(kOffset ? size_t(rows * per_row_) : 0) {}

  // Row r's block b from its values x[0, 32): the grid is stored, the codes cleared.
  void start(int64_t r, int64_t b, const float* x) {
    const size_t k = size_t(r * per_row_ + b);
    float d;
    if constexpr (kOffset) {
      float lo = x[0], hi = x[0];
      for (int64_t j = 1; j < kWidth; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
      d = (hi - lo) / float(kLevels - 1);
      min_[k] = lo;
    } else if constexpr (kQ8) {
      float amax = 0.0f;
      for (int64_t j = 0; j < kWidth; ++j) amax = std::max(amax, std::fabs(x[j]));
      d = amax / 127;
    } else {
      float amax = 0.0f, max = 0.0f;
      for (int64_t j = 0; j < kWidth; ++j)
        if (amax < std::fabs(x[j])) {
          amax = std::fabs(x[j]);
          max = x[j];
        }
      d = max / -float(kLevels / 2);
    }
    inv_scale_[k] = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t* blk = block(r, b);
    const uint16_t d16 = fp32_to_fp16(d);
    std::memcpy(blk, &d16, 2);
    if constexpr (kOffset) {
      const uint16_t m16 = fp32_to_fp16(min_[k]);
      std::memcpy(blk + 2, &m16, 2);
    }
    std::memset(blk + kHeader, 0, kBlockBytes - kHeader);
  }

  // Codes row r's value x of column c; returns the value a reader dequantizes.
  double code(int64_t r, int64_t c, float x) {
    const int64_t b = c / kWidth;
    const int i = int(c % kWidth);
    const size_t k = size_t(r * per_row_ + b);
    uint8_t* blk = block(r, b);
    uint16_t d16;
    std::memcpy(&d16, blk, 2);
    const float d = fp16_to_fp32(d16);
    if constexpr (kQ8) {
      const int q = int(std::clamp(std::round(x * inv_scale_[k]), -127.0f, 127.0f));
      blk[2 + i] = uint8_t(int8_t(q));
      return double(d * float(q));
    } else {
      const float t = kOffset ? (x - min_[k]) * inv_scale_[k] + 0.5f : x * inv_scale_[k] + (float(kLevels / 2) + 0.5f);
      const int q = !(t > 0.0f) ? 0 : t >= float(kLevels - 1) ? kLevels - 1 : int(t);
      // The low nibble in qs (value i < 16: low half of byte i, else high half of byte
      // i - 16); Q5's fifth bit is bit i of the 32-bit qh word before qs.
      uint8_t* qs = blk + kHeader + (kFiveBits ? 4 : 0);
      qs[i % 16] = uint8_t(qs[i % 16] | ((q & 15) << (i < 16 ? 0 : 4)));
      if constexpr (kFiveBits) blk[kHeader + i / 8] = uint8_t(blk[kHeader + i / 8] | ((q >> 4) << (i % 8)));
      if constexpr (kOffset) {
        uint16_t m16;
        std::memcpy(&m16, blk + 2, 2);
        return double(quant::mul_then_add(float(q), d, fp16_to_fp32(m16)));
      } else {
        return double(float(q - kLevels / 2) * d);
      }
    }
  }

 private:
  static constexpr size_t kHeader = kOffset ? 4 : 2;   // fp16 d, and m
  static constexpr size_t kBlockBytes = kQ8 ? 34 : kHeader + (kFiveBits ? 4 : 0) + 16;
  static_assert(kBlockBytes == (kQ8 ? sizeof(quant::BlockQ8_0) : !kFiveBits ? (kOffset ? sizeof(quant::BlockQ4_1) : sizeof(quant::BlockQ4_0)) : (kOffset ? sizeof(quant::BlockQ5_1) : sizeof(quant::BlockQ5_0))));
  uint8_t* block(int64_t r, int64_t b) { return bytes_ + size_t(r * per_row_ + b) * kBlockBytes; }
  uint8_t* bytes_;
  int64_t per_row_;
  std::vector<float> inv_scale_;   // [rows][blocks]: 1 / d, 0 for d = 0
  std::vector<float> min_;         // [rows][blocks]: the unrounded minimum (Q4_1, Q5_1)
};

// Q4_K / Q5_K: the grid (and the codes of the block as it stood) of the searched
// quantizer; each value is then recoded on that grid as the searched quantizer's last
// step does, codes in [0, 16) / [0, 32); Q5_K's fifth bit of value l of sub-block s is
// bit s of qh[l].
template <bool kFiveBits>
class GridK {
 public:
  static constexpr int64_t kWidth = quant::kQKK;   // 256 columns per super-block
  using Block = std::conditional_t<kFiveBits, quant::BlockQ5_K, quant::BlockQ4_K>;

  GridK(void* dst, int64_t, int64_t cols) : blocks_(static_cast<Block*>(dst)), per_row_(cols / kWidth) {}

  void start(int64_t r, int64_t b, const float* x) {
    if constexpr (kFiveBits)
      quantize_q5_k_searched(x, &blocks_[r * per_row_ + b], kWidth);
    else
      quantize_q4_k_searched(x, &blocks_[r * per_row_ + b], kWidth);
  }

  double code(int64_t r, int64_t c, float x) {
    Block& blk = blocks_[r * per_row_ + c / kWidth];
    const int64_t i = c % kWidth;
    const int sub = int(i / 32), l = int(i % 32);
    const quant::KScales k = quant::unpack_k_scales(blk.scales);
    const float step = quant::load_fp16(blk.d) * float(k.sc[sub]), offset = quant::load_fp16(blk.dmin) * float(k.mn[sub]);
    uint8_t& byte = blk.qs[32 * (sub / 2) + l];
    const int shift = 4 * (sub % 2);
    int q = (byte >> shift) & 15;   // kept where the step is 0 (the value is -offset whatever q is)
    if constexpr (kFiveBits) q |= ((blk.qh[l] >> sub) & 1) << 4;
    if (step != 0) {
      q = std::clamp(int(std::nearbyint((x + offset) / step)), 0, kFiveBits ? 31 : 15);
      byte = uint8_t((byte & ~(15 << shift)) | ((q & 15) << shift));
      if constexpr (kFiveBits) blk.qh[l] = uint8_t((blk.qh[l] & ~(1 << sub)) | ((q >> 4) << sub));
    }
    return double(quant::mul_then_add(step, float(q), -offset));
  }

 private:
  Block* blocks_;
  int64_t per_row_;
};
using GridQ4_K = GridK<false>;
using GridQ5_K = GridK<true>;

// Q6_K: 16 sub-blocks of 16 with signed 8-bit scales; each value is recoded as the
// searched quantizer's last step does, q = clamp(round(x / (d * sc_s)), -32, 31) + 32,
// and dequantized (d * sc_s) * (q - 32). Layout (blocks.hpp): in half h of 128 values,
// value l of quarter u (32 values each) has its low nibble in ql[64 h + l + 32 (u & 1)]
// (the high half for u >= 2) and its top two bits at 2u in qh[32 h + l].
class GridQ6_K {
 public:
  static constexpr int64_t kWidth = quant::kQKK;

  GridQ6_K(void* dst, int64_t, int64_t cols) : blocks_(static_cast<quant::BlockQ6_K*>(dst)), per_row_(cols / kWidth) {}

  void start(int64_t r, int64_t b, const float* x) { quantize_q6_k_searched(x, &blocks_[r * per_row_ + b], kWidth); }

  double code(int64_t r, int64_t c, float x) {
    quant::BlockQ6_K& blk = blocks_[r * per_row_ + c / kWidth];
    const int i = int(c % kWidth);
    const int h = i / 128, u = (i % 128) / 32, l = i % 32;
    uint8_t& low = blk.ql[64 * h + l + 32 * (u & 1)];
    uint8_t& high = blk.qh[32 * h + l];
    const int low_shift = u < 2 ? 0 : 4;
    const float step = quant::load_fp16(blk.d) * float(blk.scales[i / 16]);
    int q = ((low >> low_shift) & 15) | (((high >> (2 * u)) & 3) << 4);   // kept where the step is 0
    if (step != 0) {
      q = std::clamp(int(std::nearbyint(x / step)), -32, 31) + 32;
      low = uint8_t((low & ~(15 << low_shift)) | ((q & 15) << low_shift));
      high = uint8_t((high & ~(3 << (2 * u))) | ((q >> 4) << (2 * u)));
    }
    return double(step * float(q - 32));
  }

 private:
  quant::BlockQ6_K* blocks_;
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

// Q8_W (lib/quant/q8_w.cpp): one scale per row, d = max |w| / 127 over the whole row
// before any column is quantized (set by rows(); GPTQ's static per-channel grid), written
// as fp16 into every 32-value block; each value then gets q = clamp(round-half-even(w *
// 127 / max), -127, 127), dequantized fp16(d) * q.
class GridQ8W {
 public:
  static constexpr int64_t kWidth = quant::kQK;
  static constexpr bool kWholeRow = true;

  GridQ8W(void* dst, int64_t rows, int64_t cols)
      : blocks_(static_cast<quant::BlockQ8_0*>(dst)), per_row_(cols / kWidth), inv_(size_t(rows)), d16_(size_t(rows)) {}

  // The rows' scales from their values w [rows][cols] (any column order).
  void rows(const MatrixD& w) {
    for (int64_t r = 0; r < w.rows(); ++r) {
      const float amax = float(w.row(r).cwiseAbs().maxCoeff());
      inv_[size_t(r)] = amax != 0.0f ? 127.0f / amax : 0.0f;
      d16_[size_t(r)] = fp32_to_fp16(amax / 127.0f);
    }
  }

  void start(int64_t r, int64_t b, const float*) {
    quant::BlockQ8_0& blk = blocks_[r * per_row_ + b];
    blk.d = d16_[size_t(r)];
    std::memset(blk.qs, 0, sizeof(blk.qs));
  }

  double code(int64_t r, int64_t c, float x) {
    quant::BlockQ8_0& blk = blocks_[r * per_row_ + c / kWidth];
    const int q = int(std::clamp(std::nearbyint(x * inv_[size_t(r)]), -127.0f, 127.0f));
    blk.qs[c % kWidth] = int8_t(q);
    return double(fp16_to_fp32(d16_[size_t(r)]) * float(q));
  }

 private:
  quant::BlockQ8_0* blocks_;
  int64_t per_row_;
  std::vector<float> inv_;       // [rows]: 127 / max |w|, 0 for a zero row
  std::vector<uint16_t> d16_;    // [rows]: fp16 d
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

// Rows [r0, r0 + rows) of W (all rows are independent given H): their codes go to dst,
// which points at row r0's bytes.
template <class Grid>
void gptq_rows(const float* weights, int64_t rows, int64_t cols, const Factor& f, void* dst, const GptqOptions& options) {
  constexpr int64_t kWidth = Grid::kWidth;
  const MatrixD& u = f.u;
  std::vector<int64_t> position(static_cast<size_t>(cols));   // position[c]: where column c is quantized
  for (int64_t k = 0; k < cols; ++k) position[size_t(f.order[size_t(k)])] = k;

  MatrixD w(rows, cols);   // permuted, column-major: one column's update runs over contiguous rows
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) w(r, position[size_t(c)]) = f.dead[size_t(c)] ? 0.0 : double(weights[r * cols + c]);

  Grid grid(dst, rows, cols);
  if constexpr (requires { Grid::kWholeRow; }) grid.rows(w);
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

// Rows go in fixed chunks of kRowChunk, so the bytes do not depend on the thread count.
constexpr int64_t kRowChunk = 64;

template <class Grid>
void run_gptq(quant::DType type, const float* weights, int64_t rows, int64_t cols, const double* hessian, void* dst,
              const GptqOptions& options) {
  constexpr int64_t kWidth = Grid::kWidth;
  require(cols % kWidth == 0, "gptq: {} x {} weights: the row length must be a positive multiple of {}", rows, cols, kWidth);
  if (rows == 0) return;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = weights[r * cols + c];
      if (!std::isfinite(v)) fail(ErrorCode::malformed_file, "gptq: weight ({}, {}) is not finite ({})", r, c, v);
    }
  const Factor f = factor_hessian(hessian, cols, options);
  const size_t row_bytes = quant::row_bytes(type, cols);
  const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  const int n = int(std::min<int64_t>(options.threads, chunks));
  std::atomic<int64_t> next{0};
  run_parallel(n, [&](int) {
    for (int64_t k; (k = next.fetch_add(1)) < chunks;) {
      const int64_t r0 = k * kRowChunk, nr = std::min(kRowChunk, rows - r0);
      gptq_rows<Grid>(weights + r0 * cols, nr, cols, f, static_cast<std::byte*>(dst) + size_t(r0) * row_bytes, options);
    }
  });
}

}  // namespace

bool gptq_can_write(quant::DType type) {
  using quant::DType;
  switch (type) {
    case DType::q4_0: case DType::q4_1: case DType::q5_0: case DType::q5_1: case DType::q8_0:
    case DType::q4_k: case DType::q5_k: case DType::q6_k: case DType::q4_g128: case DType::q4_g64: case DType::q8_w:
      return true;
    default: return false;
  }
}

void gptq_quantize(quant::DType type, const float* weights, int64_t rows, int64_t cols, const double* hessian, void* dst,
                   const GptqOptions& options) {
  if (!gptq_can_write(type))
    fail(ErrorCode::unsupported, "gptq: writes Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, Q4_G128, Q4_G64 and Q8_W, not {}",
         quant::type_name(type));
  require(rows >= 0 && cols > 0, "gptq: {} x {} weights: the row length must be a positive multiple of the block", rows,
          cols);
  require(options.damp > 0 && std::isfinite(options.damp), "gptq: damp is {}, must be > 0", options.damp);
  require(options.threads >= 1, "gptq: threads is {}, must be at least 1", options.threads);
  require(options.block_columns > 0 && options.block_columns % quant::kQK == 0,
          "gptq: block_columns is {}, must be a positive multiple of 32", options.block_columns);
  switch (type) {
    case quant::DType::q4_0: return run_gptq<Grid32<quant::DType::q4_0>>(type, weights, rows, cols, hessian, dst, options);
    case quant::DType::q4_1: return run_gptq<Grid32<quant::DType::q4_1>>(type, weights, rows, cols, hessian, dst, options);
    case quant::DType::q5_0: return run_gptq<Grid32<quant::DType::q5_0>>(type, weights, rows, cols, hessian, dst, options);
    case quant::DType::q5_1: return run_gptq<Grid32<quant::DType::q5_1>>(type, weights, rows, cols, hessian, dst, options);
    case quant::DType::q8_0: return run_gptq<Grid32<quant::DType::q8_0>>(type, weights, rows, cols, hessian, dst, options);
    case quant::DType::q4_k: return run_gptq<GridQ4_K>(type, weights, rows, cols, hessian, dst, options);
    case quant::DType::q5_k: return run_gptq<GridQ5_K>(type, weights, rows, cols, hessian, dst, options);
    case quant::DType::q6_k: return run_gptq<GridQ6_K>(type, weights, rows, cols, hessian, dst, options);
    case quant::DType::q4_g128: return run_gptq<GridQ4G<128>>(type, weights, rows, cols, hessian, dst, options);
    case quant::DType::q8_w: return run_gptq<GridQ8W>(type, weights, rows, cols, hessian, dst, options);
    default: return run_gptq<GridQ4G<64>>(type, weights, rows, cols, hessian, dst, options);
  }
}

}  // namespace ember::quantize
