// F16: IEEE binary16 values; dot products take F32 activations.
#include "common/fp16.hpp"
#include "quant/formats.hpp"

namespace ember::quant::ref {

void dequantize_f16(const void* src, float* dst, int64_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}

// Round to nearest even; values beyond the half range become infinities.
void quantize_f16(const float* src, void* dst, int64_t n) {
  uint16_t* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}

float dot_f16(const void* w, const void* x, int64_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(w);
  const float* xf = static_cast<const float*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(fp16_to_fp32(h[i])) * double(xf[i]);
  return float(sum);
}

}  // namespace ember::quant::ref
