// Shape and type checks shared by the op headers. A failed check throws
// ember::Error(invalid_argument) naming the op and the operand.
#pragma once

#include "backend/backend.hpp"
#include "common/fail.hpp"

namespace ember::ops::detail {

using backend::DType;
using backend::Tensor;

inline void expect_type(const char* op, const char* operand, const Tensor& t, DType type) {
  if (t.type != type)
    fail(ErrorCode::invalid_argument, "{}: {} has type {}, expected {}", op, operand, quant::type_name(t.type),
         quant::type_name(type));
}

inline void expect_shape(const char* op, const char* operand, const Tensor& t, int64_t rows, int64_t cols) {
  if (t.rows != rows || t.cols != cols)
    fail(ErrorCode::invalid_argument, "{}: {} is [{}, {}], expected [{}, {}]", op, operand, t.rows, t.cols, rows,
         cols);
}

inline void expect_present(const char* op, const char* operand, const Tensor& t) {
  if (t.empty()) fail(ErrorCode::invalid_argument, "{}: {} is missing", op, operand);
}

inline void expect_contiguous(const char* op, const char* operand, const Tensor& t) {
  if (!t.contiguous()) fail(ErrorCode::invalid_argument, "{}: {} must be contiguous", op, operand);
}

// An operand the op reads or writes while it writes `out`: their bytes must not overlap.
inline void expect_apart(const char* op, const char* operand, const Tensor& t, const Tensor& out) {
  if (t.buffer != nullptr && t.buffer == out.buffer && t.offset < out.offset + out.bytes() &&
      out.offset < t.offset + t.bytes())
    fail(ErrorCode::invalid_argument, "{}: {} overlaps out", op, operand);
}

// Weights repacked by a backend (Tensor::layout) go to that backend's matmul only.
inline void expect_plain_layout(const char* op, const char* operand, const Tensor& t) {
  if (t.layout != 0)
    fail(ErrorCode::invalid_argument, "{}: {} is a weight repacked for matmul (layout {}); only matmul reads it", op,
         operand, t.layout);
}

}  // namespace ember::ops::detail
