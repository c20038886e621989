// RMSNorm on the CPU with llama.cpp's roundings (ggml-cpu rms_norm followed by the
// weight multiply), so that a model's hidden state can agree with llama.cpp's bit
// for bit: each square is rounded to float, the squares are summed in double from
// the first column to the last, the mean is rounded to float, and the factor is
// 1.0f / sqrtf(mean + eps) in float; out = (x * factor) * w (OpKernels::scale_weighted).
#include <cmath>

#include "cpu/kernels/op_kernels.hpp"
#include "cpu/ops/ops.hpp"

namespace ember::cpu {
namespace {

// Sequential on purpose: another summation order changes the last bit of the mean
// now and then. The loop is a small part of the op (one add per column).
double sum_squares(const float* x, int64_t n) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += double(x[i] * x[i]);
  return total;
}

}  // namespace

void rms_norm(OpContext& ctx, const Tensor& x, const Tensor& weight, float eps, const Tensor& out) {
  const float* w = weight.empty() ? nullptr : weight.row_ptr<float>(0);
  const auto scale_weighted = op_kernels(ctx.isa).scale_weighted;
  auto rows = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* px = x.row_ptr<float>(r);
      const auto mean = float(sum_squares(px, x.cols) / double(x.cols));
      const float inv_rms = 1.0f / std::sqrt(mean + eps);
      scale_weighted(px, w, inv_rms, out.row_ptr<float>(r), x.cols);
    }
  };
  if (x.rows * x.cols < (1 << 14)) {
    rows(0, x.rows);
  } else {
    ctx.pool.parallel_for(x.rows, rows);
  }
}

}  // namespace ember::cpu
