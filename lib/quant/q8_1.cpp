// Q8_1: the activation format of Q4_1 and Q5_1. As Q8_0 plus s = d * sum(q), which
// carries the weights' block offset m through the dot product: sum(m * a) = m * s.
#include <cmath>

#include "quant/blocks.hpp"
#include "quant/formats.hpp"

namespace ember::quant::ref {

void dequantize_q8_1(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_1*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = load_fp16(blocks[b].d);
    for (int i = 0; i < kQK; ++i) dst[b * kQK + i] = d * float(blocks[b].qs[i]);
  }
}

// As quantize_q8_0; s is rounded to fp16 from the unrounded d (ggml's quantize_row_q8_1_ref).
void quantize_q8_1(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    float amax = 0.0f;
    for (int i = 0; i < kQK; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int i = 0; i < kQK; ++i) {
      blocks[b].qs[i] = int8_t(std::nearbyint(x[i] * id));
      sum += blocks[b].qs[i];
    }
    blocks[b].d = fp32_to_fp16(d);
    blocks[b].s = fp32_to_fp16(float(sum) * d);
  }
}

}  // namespace ember::quant::ref
