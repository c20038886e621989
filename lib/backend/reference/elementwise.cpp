#include <cmath>

#include "backend/reference/ops.hpp"

namespace ember::reference {
namespace {

template <typename F>
void binary(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  for (int64_t r = 0; r < a.rows; ++r) {
    const float* pa = a.row_ptr<float>(r);
    const float* pb = b.row_ptr<float>(b.rows == 1 ? 0 : r);
    float* po = out.row_ptr<float>(r);
    for (int64_t c = 0; c < a.cols; ++c) po[c] = f(pa[c], pb[c]);
  }
}

}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  binary(a, b, out, [](float x, float y) { return x + y; });
}

void mul(const Tensor& a, const Tensor& b, const Tensor& out) {
  binary(a, b, out, [](float x, float y) { return x * y; });
}

void scale(const Tensor& x, float factor, const Tensor& out) {
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* px = x.row_ptr<float>(r);
    float* po = out.row_ptr<float>(r);
    for (int64_t c = 0; c < x.cols; ++c) po[c] = px[c] * factor;
  }
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

void glu(const Tensor& gate, const Tensor& up, backend::Activation activation, const Tensor& out) {
  for (int64_t r = 0; r < gate.rows; ++r) {
    const float* g = gate.row_ptr<float>(r);
    const float* u = up.row_ptr<float>(r);
    float* o = out.row_ptr<float>(r);
    for (int64_t c = 0; c < gate.cols; ++c) {
      const float a = activation == backend::Activation::silu ? silu(g[c]) : gelu_tanh(g[c]);
      o[c] = a * u[c];
    }
  }
}

}  // namespace ember::reference
