// add, mul, scale and glu on the CPU: row-parallel, vectorized per ISA by target_clones.
#include "backend/reference/ops.hpp"
#include "cpu/ops/ops.hpp"
#include "cpu/ops/vec_math.hpp"

namespace ember::cpu {
namespace {

// Below this many values an op runs on the calling thread only.
constexpr int64_t kParallelThreshold = 1 << 14;

EMBER_VECTORIZE void add_row(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
EMBER_VECTORIZE void mul_row(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}
EMBER_VECTORIZE void scale_row(const float* x, float factor, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * factor;
}
EMBER_VECTORIZE void silu_glu_row(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu_approx(gate[i]) * up[i];
}
EMBER_VECTORIZE void gelu_glu_row(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh_approx(gate[i]) * up[i];
}

template <typename RowFn>
void for_rows(OpContext& ctx, int64_t rows, int64_t cols, RowFn&& fn) {
  if (rows * cols < kParallelThreshold || rows == 1) {
    for (int64_t r = 0; r < rows; ++r) fn(r);
    return;
  }
  ctx.pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) fn(r);
  });
}

}  // namespace

void add(OpContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  for_rows(ctx, a.rows, a.cols, [&](int64_t r) {
    add_row(a.row_ptr<float>(r), b.row_ptr<float>(b.rows == 1 ? 0 : r), out.row_ptr<float>(r), a.cols);
  });
}

void mul(OpContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  for_rows(ctx, a.rows, a.cols, [&](int64_t r) {
    mul_row(a.row_ptr<float>(r), b.row_ptr<float>(b.rows == 1 ? 0 : r), out.row_ptr<float>(r), a.cols);
  });
}

void scale(OpContext& ctx, const Tensor& x, float factor, const Tensor& out) {
  for_rows(ctx, x.rows, x.cols,
           [&](int64_t r) { scale_row(x.row_ptr<float>(r), factor, out.row_ptr<float>(r), x.cols); });
}

void glu(OpContext& ctx, const Tensor& gate, const Tensor& up, backend::Activation activation, const Tensor& out) {
  const auto row_fn = activation == backend::Activation::silu ? silu_glu_row : gelu_glu_row;
  if (gate.rows == 1 && gate.cols >= kParallelThreshold / 4) {
    // Decode: split the single row over threads.
    ctx.pool.parallel_for(gate.cols / 16, [&](int64_t begin, int64_t end) {
      const int64_t c0 = begin * 16, c1 = end == gate.cols / 16 ? gate.cols : end * 16;
      row_fn(gate.row_ptr<float>(0) + c0, up.row_ptr<float>(0) + c0, out.row_ptr<float>(0) + c0, c1 - c0);
    });
    return;
  }
  for_rows(ctx, gate.rows, gate.cols, [&](int64_t r) {
    row_fn(gate.row_ptr<float>(r), up.row_ptr<float>(r), out.row_ptr<float>(r), gate.cols);
  });
}

}  // namespace ember::cpu
