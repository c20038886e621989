// Q4_0: 32 values per block, x = d * (q - 8), q in [0, 16), fp16 d. Activations: Q8_0.
#include <algorithm>
#include <cmath>

#include "quant/blocks.hpp"
#include "quant/formats.hpp"

namespace ember::quant::ref {
namespace {
// Code i (0..31) of a block: low nibbles hold values 0..15, high nibbles 16..31.
inline int code(const BlockQ4_0& b, int i) { return i < 16 ? (b.qs[i] & 15) : (b.qs[i - 16] >> 4); }
}  // namespace

void dequantize_q4_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = load_fp16(blocks[b].d);
    for (int i = 0; i < kQK; ++i) dst[b * kQK + i] = float(code(blocks[b], i) - 8) * d;
  }
}

// ggml's quantize_row_q4_0_ref: d = -(value of largest magnitude) / 8, so that value maps to
// code 0 exactly; q = min(15, trunc(x / d + 8.5)).
void quantize_q4_0(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ4_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < kQK; ++i)
      if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = fp32_to_fp16(d);
    for (int i = 0; i < 16; ++i) {
      const int lo = std::min(15, int(x[i] * id + 8.5f));
      const int hi = std::min(15, int(x[i + 16] * id + 8.5f));
      blocks[b].qs[i] = uint8_t(lo | (hi << 4));
    }
  }
}

// Per block: (d_w * d_a) * sum((q_w - 8) * q_a).
float dot_q4_0(const void* w, const void* a_q8_0, int64_t n) {
  const auto* wb = static_cast<const BlockQ4_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a_q8_0);
  double sum = 0.0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int32_t sumi = 0;
    for (int i = 0; i < kQK; ++i) sumi += (code(wb[b], i) - 8) * int32_t(ab[b].qs[i]);
    sum += (load_fp16(wb[b].d) * load_fp16(ab[b].d)) * float(sumi);
  }
  return float(sum);
}

}  // namespace ember::quant::ref
