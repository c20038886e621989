#include <cmath>

#include "cpu/ops/ops.hpp"
#include "cpu/ops/vec_math.hpp"

namespace ember::cpu {
namespace {

EMBER_VECTORIZE double sum_squares(const float* x, int64_t n) {
  // Eight float lanes, then one double sum: vectorizes, and keeps the rounding
  // error far below the tolerance of the ops tests.
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += x[i + l] * x[i + l];
  double total = 0.0;
  for (int l = 0; l < 8; ++l) total += lanes[l];
  for (; i < n; ++i) total += double(x[i]) * x[i];
  return total;
}

EMBER_VECTORIZE void scale_weighted(const float* x, const float* w, float factor, float* out, int64_t n) {
  if (w) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * factor * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * factor;
  }
}

}  // namespace

void rms_norm(OpContext& ctx, const Tensor& x, const Tensor& weight, float eps, const Tensor& out) {
  const float* w = weight.empty() ? nullptr : weight.row_ptr<float>(0);
  auto rows = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* px = x.row_ptr<float>(r);
      const double mean = sum_squares(px, x.cols) / double(x.cols);
      const float inv_rms = float(1.0 / std::sqrt(mean + double(eps)));
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
