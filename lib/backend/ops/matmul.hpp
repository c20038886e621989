// matmul: multiplies activations by a weight matrix kept in its file format.
//
//   weights: [n_out, n_in], any weight type (quant::weight_types()), rows contiguous;
//            in the format's own layout, or in the one this backend's prepare_weight gave
//   x:       [n_tok, n_in] f32
//   out:     [n_tok, n_out] f32; out[t][o] = sum_i weights[o][i] * x[t][i]
// Numerics (the contract every backend follows): each row of x is first converted
// to quant::activation_type(weights.type), then each output is
// quant::dot_row(weights.type, weights[o], converted x[t], n_in). Backends may
// differ from the reference only by float summation order.
#pragma once

#include "backend/ops/check.hpp"

namespace ember::ops {

inline void matmul(backend::Backend& be, const backend::Tensor& weights, const backend::Tensor& x,
                   const backend::Tensor& out) {
  using namespace detail;
  expect_type("matmul", "x", x, DType::f32);
  expect_type("matmul", "out", out, DType::f32);
  if (!quant::type_info(weights.type).weight_supported)
    fail(ErrorCode::unsupported, "matmul: weight type {} is not supported", quant::type_name(weights.type));
  expect_shape("matmul", "x", x, x.rows, weights.cols);
  expect_shape("matmul", "out", out, x.rows, weights.rows);
  be.matmul(weights, x, out);
}

}  // namespace ember::ops
