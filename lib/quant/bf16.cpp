// BF16: the upper 16 bits of an IEEE binary32; dot products take F32 activations.
#include "common/fp16.hpp"
#include "quant/formats.hpp"

namespace ember::quant::ref {

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const uint16_t* b = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(b[i]);
}

// Round to nearest even (as gguf-py and ggml convert F32 weights).
void quantize_bf16(const float* src, void* dst, int64_t n) {
  uint16_t* b = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) b[i] = fp32_to_bf16(src[i]);
}

float dot_bf16(const void* w, const void* x, int64_t n) {
  const uint16_t* b = static_cast<const uint16_t*>(w);
  const float* xf = static_cast<const float*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(bf16_to_fp32(b[i])) * double(xf[i]);
  return float(sum);
}

}  // namespace ember::quant::ref
