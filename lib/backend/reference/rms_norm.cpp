#include <cmath>

#include "backend/reference/ops.hpp"

namespace ember::reference {

void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) {
  const float* w = weight.empty() ? nullptr : weight.row_ptr<float>(0);
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* px = x.row_ptr<float>(r);
    float* po = out.row_ptr<float>(r);
    double sum_sq = 0.0;
    for (int64_t c = 0; c < x.cols; ++c) sum_sq += double(px[c]) * px[c];
    const float inv_rms = float(1.0 / std::sqrt(sum_sq / double(x.cols) + double(eps)));
    for (int64_t c = 0; c < x.cols; ++c) po[c] = px[c] * inv_rms * (w ? w[c] : 1.0f);
  }
}

}  // namespace ember::reference
