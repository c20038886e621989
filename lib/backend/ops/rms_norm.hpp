// rms_norm: root-mean-square normalisation of each row (Zhang & Sennrich 2019).
//
//   x:      [n, m] f32
//   weight: [1, m] f32, or an empty Tensor for no weight
//   out:    [n, m] f32, may alias x; out[r][i] = x[r][i] / sqrt(mean_i(x[r]^2) + eps) * weight[i]
// Per-head norms (qwen3, gemma3 Q/K norms) pass x reshaped to [n_tok * n_head, head_dim].
// The mean of squares is accumulated in double in the reference.
#pragma once

#include "backend/ops/check.hpp"

namespace ember::ops {

inline void rms_norm(backend::Backend& be, const backend::Tensor& x, const backend::Tensor& weight, float eps,
                     const backend::Tensor& out) {
  using namespace detail;
  expect_type("rms_norm", "x", x, DType::f32);
  expect_type("rms_norm", "out", out, DType::f32);
  expect_shape("rms_norm", "out", out, x.rows, x.cols);
  if (!weight.empty()) {
    expect_type("rms_norm", "weight", weight, DType::f32);
    expect_shape("rms_norm", "weight", weight, 1, x.cols);
  }
  if (!(eps >= 0.0f)) fail(ErrorCode::invalid_argument, "rms_norm: eps must be >= 0, got {}", eps);
  be.rms_norm(x, weight, eps, out);
}

}  // namespace ember::ops
