// add, mul, scale and glu on the CPU: row-parallel; the rows are the level's OpKernels
// entries (cpu/ops/levels: loops.cpp and <level>/f16.cpp).
//
// The activations follow llama.cpp's CPU backend bit for bit, so that a model's
// hidden state can agree with llama.cpp's exactly (docs/model.md, "Numerics"):
// SiLU is x / (1 + e^-x) with exp_fma (ggml's vector SiLU); GELU (tanh form) is
// read from a table over all F16 values: the input is rounded to F16 and the
// result is the F16-rounded GELU of that (ggml's GGML_GELU_FP16), except that
// x <= -10 gives 0 and x >= 10 gives x. So GELU has F16 precision (relative error
// up to ~1e-3), which is what llama.cpp's CPU results carry.
#include "cpu/kernels/op_kernels.hpp"
#include "cpu/ops/ops.hpp"

namespace ember::cpu {
namespace {

// Below this many values an op runs on the calling thread only.
constexpr int64_t kParallelThreshold = 1 << 14;

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
  const auto add_row = op_kernels(ctx.isa).add_row;
  for_rows(ctx, a.rows, a.cols, [&](int64_t r) {
    add_row(a.row_ptr<float>(r), b.row_ptr<float>(b.rows == 1 ? 0 : r), out.row_ptr<float>(r), a.cols);
  });
}

void mul(OpContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  const auto mul_row = op_kernels(ctx.isa).mul_row;
  for_rows(ctx, a.rows, a.cols, [&](int64_t r) {
    mul_row(a.row_ptr<float>(r), b.row_ptr<float>(b.rows == 1 ? 0 : r), out.row_ptr<float>(r), a.cols);
  });
}

void scale(OpContext& ctx, const Tensor& x, float factor, const Tensor& out) {
  const auto scale_row = op_kernels(ctx.isa).scale_row;
  for_rows(ctx, x.rows, x.cols,
           [&](int64_t r) { scale_row(x.row_ptr<float>(r), factor, out.row_ptr<float>(r), x.cols); });
}

void glu(OpContext& ctx, const Tensor& gate, const Tensor& up, backend::Activation activation, const Tensor& out) {
  const OpKernels& kernels = op_kernels(ctx.isa);
  const auto row_fn = activation == backend::Activation::silu ? kernels.silu_glu_row : kernels.gelu_glu_row;
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
