// Q5_0: 32 values per block, x = d * (q - 16), q in [0, 32), fp16 d. Activations: Q8_0.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.hpp"
#include "quant/formats.hpp"
#include "quant/lanes.hpp"

namespace ember::quant::ref {
void dequantize_q5_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = load_fp16(blocks[b].d);
    const uint32_t qh = q5_high_bits(blocks[b].qh);
    for (int i = 0; i < kQK; ++i) dst[b * kQK + i] = float(q5_code(blocks[b], qh, i) - 16) * d;
  }
}

// ggml's quantize_row_q5_0_ref: d = -(value of largest magnitude) / 16, q = min(31, trunc(x / d + 16.5)).
void quantize_q5_0(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ5_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < kQK; ++i)
      if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int i = 0; i < 16; ++i) {
      const int lo = std::min(31, int(x[i] * id + 16.5f));
      const int hi = std::min(31, int(x[i + 16] * id + 16.5f));
      blocks[b].qs[i] = uint8_t((lo & 15) | ((hi & 15) << 4));
      qh |= uint32_t(lo >> 4) << i;
      qh |= uint32_t(hi >> 4) << (i + 16);
    }
    std::memcpy(blocks[b].qh, &qh, 4);
  }
}

// Per block: (d_w * d_a) * sum((q_w - 16) * q_a), in llama.cpp's order (quant/lanes.hpp).
float dot_q5_0(const void* w, const void* a_q8_0, int64_t n) {
  const auto* wb = static_cast<const BlockQ5_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a_q8_0);
  Lanes8 acc;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint32_t qh = q5_high_bits(wb[b].qh);
    int32_t sums[8] = {};
    for (int i = 0; i < kQK; ++i) sums[i / 4] += (q5_code(wb[b], qh, i) - 16) * int32_t(ab[b].qs[i]);
    acc.madd(load_fp16(wb[b].d) * load_fp16(ab[b].d), sums);
  }
  return acc.sum();
}

}  // namespace ember::quant::ref
