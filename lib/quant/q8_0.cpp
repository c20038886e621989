// Q8_0: 32 values per block, x = d * q with q in [-127, 127] and an fp16 d.
// Used as a weight format and as the activation format of Q4_0, Q5_0 and Q8_0.
#include <cmath>

#include "quant/blocks.hpp"
#include "quant/formats.hpp"
#include "quant/lanes.hpp"

namespace ember::quant::ref {

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = load_fp16(blocks[b].d);
    for (int i = 0; i < kQK; ++i) dst[b * kQK + i] = d * float(blocks[b].qs[i]);
  }
}

// d = max|x| / 127; q = x * (127 / max|x|) rounded half to even: the arithmetic llama.cpp runs on
// x86 (its AVX quantize_row_q8_0), so that both give the same codes for the same activations.
void quantize_q8_0(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    float amax = 0.0f;
    for (int i = 0; i < kQK; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    for (int i = 0; i < kQK; ++i) blocks[b].qs[i] = int8_t(std::nearbyint(x[i] * id));
  }
}

// Per block: (d_w * d_a) * sum(q_w * q_a), in llama.cpp's order (quant/lanes.hpp).
float dot_q8_0(const void* w, const void* a_q8_0, int64_t n) {
  const auto* wb = static_cast<const BlockQ8_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a_q8_0);
  Lanes8 acc;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int32_t sums[8] = {};
    for (int i = 0; i < kQK; ++i) sums[i / 4] += int32_t(wb[b].qs[i]) * int32_t(ab[b].qs[i]);
    acc.madd(load_fp16(wb[b].d) * load_fp16(ab[b].d), sums);
  }
  return acc.sum();
}

}  // namespace ember::quant::ref
