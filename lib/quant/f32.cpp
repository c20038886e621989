// F32: plain IEEE binary32 values; dot products take F32 activations.
#include <cstring>

#include "quant/formats.hpp"

namespace ember::quant::ref {

void dequantize_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * sizeof(float)); }

void quantize_f32(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * sizeof(float)); }

float dot_f32(const void* w, const void* x, int64_t n) {
  const float* wf = static_cast<const float*>(w);
  const float* xf = static_cast<const float*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(wf[i]) * double(xf[i]);
  return float(sum);
}

}  // namespace ember::quant::ref
