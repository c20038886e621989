// Q5_1: 32 values per block, x = d * q + m, q in [0, 32), fp16 d and m. Activations: Q8_1.
#include <algorithm>
#include <cfloat>
#include <cstring>

#include "quant/blocks.hpp"
#include "quant/formats.hpp"

namespace ember::quant::ref {
void dequantize_q5_1(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_1*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = load_fp16(blocks[b].d), m = load_fp16(blocks[b].m);
    const uint32_t qh = q5_high_bits(blocks[b].qh);
    for (int i = 0; i < kQK; ++i) dst[b * kQK + i] = mul_then_add(float(q5_code(blocks[b], qh, i)), d, m);
  }
}

// ggml's quantize_row_q5_1_ref: m = min, d = (max - min) / 31, q = trunc((x - m) / d + 0.5).
void quantize_q5_1(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ5_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    float min = FLT_MAX, max = -FLT_MAX;
    for (int i = 0; i < kQK; ++i) min = std::min(min, x[i]), max = std::max(max, x[i]);
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    blocks[b].m = fp32_to_fp16(min);
    uint32_t qh = 0;
    for (int i = 0; i < 16; ++i) {
      const int lo = std::min(31, int((x[i] - min) * id + 0.5f));
      const int hi = std::min(31, int((x[i + 16] - min) * id + 0.5f));
      blocks[b].qs[i] = uint8_t((lo & 15) | ((hi & 15) << 4));
      qh |= uint32_t(lo >> 4) << i;
      qh |= uint32_t(hi >> 4) << (i + 16);
    }
    std::memcpy(blocks[b].qh, &qh, 4);
  }
}

// Per block: (d_w * d_a) * sum(q_w * q_a) + m_w * s_a.
float dot_q5_1(const void* w, const void* a_q8_1, int64_t n) {
  const auto* wb = static_cast<const BlockQ5_1*>(w);
  const auto* ab = static_cast<const BlockQ8_1*>(a_q8_1);
  double sum = 0.0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    const uint32_t qh = q5_high_bits(wb[b].qh);
    int32_t sumi = 0;
    for (int i = 0; i < kQK; ++i) sumi += q5_code(wb[b], qh, i) * int32_t(ab[b].qs[i]);
    sum += (load_fp16(wb[b].d) * load_fp16(ab[b].d)) * float(sumi) + load_fp16(wb[b].m) * load_fp16(ab[b].s);
  }
  return float(sum);
}

}  // namespace ember::quant::ref
