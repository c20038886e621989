// Q6_K: super-blocks of 256 values in 16 sub-blocks of 16; x = d * sc[j] * (q - 32),
// q in [0, 64), signed 8-bit sc, fp16 d. Activations: Q8_K.
#include <algorithm>
#include <cmath>

#include "quant/blocks.hpp"
#include "quant/formats.hpp"
#include "quant/lanes.hpp"

namespace ember::quant::ref {
namespace {
// Code i (0..255) of a block, in [0, 64); the bit layout is drawn in blocks.hpp.
inline int code(const BlockQ6_K& blk, int i) {
  const int h = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
  const uint8_t low_byte = blk.ql[64 * h + l + 32 * (quarter & 1)];
  const int low = quarter < 2 ? (low_byte & 15) : (low_byte >> 4);
  const int high = (blk.qh[32 * h + l] >> (2 * quarter)) & 3;
  return low | high << 4;
}
}  // namespace

void dequantize_q6_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ6_K*>(src);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ6_K& blk = blocks[b];
    const float d = load_fp16(blk.d);
    for (int i = 0; i < kQKK; ++i) dst[b * kQKK + i] = (d * float(blk.scales[i / 16])) * float(code(blk, i) - 32);
  }
}

// Simple nearest-rounding quantizer: each 16-value group gets scale -(value of largest
// magnitude) / 32; the 16 scales are quantized to int8 against d = max|scale| / 127.
void quantize_q6_k(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ6_K*>(dst);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float* x = src + b * kQKK;
    BlockQ6_K& blk = blocks[b];
    float scales[16], max_scale = 0.0f;
    for (int j = 0; j < 16; ++j) {
      float amax = 0.0f, max = 0.0f;
      for (int l = 0; l < 16; ++l)
        if (std::fabs(x[16 * j + l]) > amax) amax = std::fabs(x[16 * j + l]), max = x[16 * j + l];
      scales[j] = max / -32.0f;
      max_scale = std::max(max_scale, std::fabs(scales[j]));
    }
    blk.d = fp32_to_fp16(max_scale / 127.0f);
    const float d = load_fp16(blk.d);
    std::fill(std::begin(blk.ql), std::end(blk.ql), uint8_t(0));
    std::fill(std::begin(blk.qh), std::end(blk.qh), uint8_t(0));
    for (int j = 0; j < 16; ++j) {
      const float sc = d != 0.0f ? std::clamp(std::round(scales[j] / d), -128.0f, 127.0f) : 0.0f;
      blk.scales[j] = int8_t(sc);
      const float step = d * sc;
      const float inv = step != 0.0f ? 1.0f / step : 0.0f;
      for (int l = 0; l < 16; ++l) {
        const int i = 16 * j + l;
        const int q = int(std::clamp(std::round(x[i] * inv), -32.0f, 31.0f)) + 32;
        const int h = i / 128, r = i % 128, quarter = r / 32, p = r % 32;
        blk.ql[64 * h + p + 32 * (quarter & 1)] |= uint8_t((q & 15) << (quarter < 2 ? 0 : 4));
        blk.qh[32 * h + p] |= uint8_t((q >> 4) << (2 * quarter));
      }
    }
  }
}

// Per super-block: (d_a * fp16(d)) * sum_j sc[j] * sum((q - 32) * q_a), in llama.cpp's
// order (quant/lanes.hpp): lane m takes the values v with (v mod 32) / 4 == m.
float dot_q6_k(const void* w, const void* a_q8_k, int64_t n) {
  const auto* wb = static_cast<const BlockQ6_K*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a_q8_k);
  Lanes8 acc;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ6_K& blk = wb[b];
    const BlockQ8_K& act = ab[b];
    int32_t sums[8] = {};
    for (int i = 0; i < kQKK; ++i)
      sums[(i % 32) / 4] += int32_t(blk.scales[i / 16]) * (code(blk, i) - 32) * int32_t(act.qs[i]);
    acc.madd(act.d * load_fp16(blk.d), sums);
  }
  return acc.sum();
}

}  // namespace ember::quant::ref
