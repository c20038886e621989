// glu: gated linear unit of the feed-forward block (Shazeer 2020, "GLU Variants").
//
//   gate, up: [n, m] f32
//   out:      [n, m] f32, may alias gate or up; out = act(gate) * up
//   silu(x) = x / (1 + exp(-x));  gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
#pragma once

#include "backend/ops/check.hpp"

namespace ember::ops {

inline void glu(backend::Backend& be, const backend::Tensor& gate, const backend::Tensor& up,
                backend::Activation activation, const backend::Tensor& out) {
  using namespace detail;
  expect_type("glu", "gate", gate, DType::f32);
  expect_type("glu", "up", up, DType::f32);
  expect_type("glu", "out", out, DType::f32);
  expect_shape("glu", "up", up, gate.rows, gate.cols);
  expect_shape("glu", "out", out, gate.rows, gate.cols);
  be.glu(gate, up, activation, out);
}

}  // namespace ember::ops
