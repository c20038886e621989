// The layer-wise output error of a quantized matrix, the measure AWQ's scale search and
// the mixed-precision planner rank choices by: for rows r of W [rows][cols],
//   e_r = deq(q(w_r * row_scale[r] * s)) / (row_scale[r] * s) - w_r   (what a reader computes,
//         with the folded input scales undone),
//   error = sum over the rows of e_r H e_r^T / rows_seen,
// H = sum x^T x over the calibration inputs (calibration.hpp): the mean squared output
// error per calibration input. Without a Hessian, H = I (the squared weight error).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "quant/dtype.hpp"
#include "quantize/calibration.hpp"

namespace ember::quantize {

// One matrix: [rows][cols] floats, the type it is written in, and an optional per-row
// scale already folded into it (ffn_up rows that feed a scaled ffn_down).
struct AwqMatrix {
  const float* weights = nullptr;
  int64_t rows = 0, cols = 0;
  quant::DType type = quant::DType::q4_0;
  const float* row_scale = nullptr;   // [rows] or null
};

// `limit` rows of `rows`, evenly spaced.
std::vector<int64_t> sample_rows(int64_t rows, int64_t limit);

class OutputError {
 public:
  // h == nullptr: the identity. The Hessian is copied (as float, divided by rows_seen).
  OutputError(const Hessian* h, int64_t cols);
  ~OutputError();
  OutputError(const OutputError&) = delete;
  OutputError& operator=(const OutputError&) = delete;

  int64_t cols() const { return cols_; }
  // The error of m's rows `rows` with column scales s (empty: all 1) and type m.type.
  // Thread-safe (const; scratch per call).
  double error(const AwqMatrix& m, std::span<const float> s, std::span<const int64_t> rows) const;
  // sum over the rows of w_r H w_r^T / rows_seen: the output's own energy.
  double energy(const AwqMatrix& m, std::span<const int64_t> rows) const;

 private:
  struct Impl;
  int64_t cols_;
  Impl* impl_;
};

}  // namespace ember::quantize
