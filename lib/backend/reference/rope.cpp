#include <cmath>

#include "backend/reference/ops.hpp"

namespace ember::reference {

void rope(const Tensor& x, const Tensor& positions, const backend::RopeParams& p, const Tensor& out) {
  const int half = p.n_rot / 2;
  const float* factors = p.freq_factors.empty() ? nullptr : p.freq_factors.row_ptr<float>(0);
  for (int64_t t = 0; t < x.rows; ++t) {
    const double pos = double(*positions.row_ptr<int32_t>(t)) * p.freq_scale;
    const float* src = x.row_ptr<float>(t);
    float* dst = out.row_ptr<float>(t);
    for (int h = 0; h < p.n_head; ++h) {
      const float* hs = src + int64_t(h) * p.head_dim;
      float* hd = dst + int64_t(h) * p.head_dim;
      for (int d = p.n_rot; d < p.head_dim; ++d) hd[d] = hs[d];
      for (int i = 0; i < half; ++i) {
        const double factor = factors ? double(factors[i]) : 1.0;
        const double theta = pos * std::pow(double(p.freq_base), -2.0 * i / p.n_rot) / factor;
        const double c = std::cos(theta) * p.mscale, s = std::sin(theta) * p.mscale;
        const int i0 = p.mode == backend::RopeMode::normal ? 2 * i : i;
        const int i1 = p.mode == backend::RopeMode::normal ? 2 * i + 1 : i + half;
        const double a = hs[i0], b = hs[i1];
        hd[i0] = float(a * c - b * s);
        hd[i1] = float(a * s + b * c);
      }
    }
  }
}

}  // namespace ember::reference
