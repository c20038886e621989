// get_rows: gathers rows of a table (embedding lookup, selecting output rows).
//
//   table: [n_rows, n_cols], any weight type (F32, F16, BF16 or a block format)
//   ids:   [n, 1] i32, each in [0, n_rows) (the caller validates ids from users)
//   out:   [n, n_cols] f32; out[i] = dequantize(table[ids[i]])
// Exact: the result equals quant::dequantize_row of the selected row.
#pragma once

#include "backend/ops/check.hpp"

namespace ember::ops {

inline void get_rows(backend::Backend& be, const backend::Tensor& table, const backend::Tensor& ids,
                     const backend::Tensor& out) {
  using namespace detail;
  expect_plain_layout("get_rows", "table", table);
  expect_type("get_rows", "ids", ids, DType::i32);
  expect_type("get_rows", "out", out, DType::f32);
  expect_shape("get_rows", "ids", ids, ids.rows, 1);
  expect_shape("get_rows", "out", out, ids.rows, table.cols);
  be.get_rows(table, ids, out);
}

}  // namespace ember::ops
