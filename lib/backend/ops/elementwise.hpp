// Element-wise f32 ops: add, mul (with row broadcast) and scale.
//
//   a:   [n, m] f32
//   b:   [n, m] or [1, m] f32 (a single row is broadcast over the n rows of a)
//   out: [n, m] f32; may alias a
//   add: out = a + b    mul: out = a * b    scale: out = x * factor
#pragma once

#include "backend/ops/check.hpp"

namespace ember::ops {

namespace detail {
inline void check_binary(const char* op, const Tensor& a, const Tensor& b, const Tensor& out) {
  expect_type(op, "a", a, DType::f32);
  expect_type(op, "b", b, DType::f32);
  expect_type(op, "out", out, DType::f32);
  if (b.rows != 1) expect_shape(op, "b", b, a.rows, a.cols);
  expect_shape(op, "b", b, b.rows, a.cols);
  expect_shape(op, "out", out, a.rows, a.cols);
}
}  // namespace detail

inline void add(backend::Backend& be, const backend::Tensor& a, const backend::Tensor& b,
                const backend::Tensor& out) {
  detail::check_binary("add", a, b, out);
  be.add(a, b, out);
}

inline void mul(backend::Backend& be, const backend::Tensor& a, const backend::Tensor& b,
                const backend::Tensor& out) {
  detail::check_binary("mul", a, b, out);
  be.mul(a, b, out);
}

inline void scale(backend::Backend& be, const backend::Tensor& x, float factor, const backend::Tensor& out) {
  using namespace detail;
  expect_type("scale", "x", x, DType::f32);
  expect_type("scale", "out", out, DType::f32);
  expect_shape("scale", "out", out, x.rows, x.cols);
  be.scale(x, factor, out);
}

}  // namespace ember::ops
