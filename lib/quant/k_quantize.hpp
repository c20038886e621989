// The reference quantizer shared by Q4_K and Q5_K (scale-and-offset super-blocks).
//
// Plain nearest rounding, not ggml's iterative search (make_qkx2_quants), so files
// it writes are a little less accurate than llama-quantize's; it exists to make
// test data. Per 32-value sub-block j: offset_j = max(0, -min x), step_j =
// (max x + offset_j) / qmax; the 8 steps and 8 offsets are coded in 6 bits against
// d = max step / 63 and dmin = max offset / 63 (both rounded to fp16 first), then
// every value is coded against the coded step and offset.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/fp16.hpp"

namespace ember::quant::ref {

struct KQuantized {
  uint16_t d, dmin;  // fp16
  uint8_t sc[8], mn[8];
};

// Codes the 256 values of `x` into q[0..256) (each in [0, qmax]).
inline KQuantized quantize_k_offset(const float* x, int qmax, uint8_t* q) {
  float step[8], offset[8], max_step = 0.0f, max_offset = 0.0f;
  for (int j = 0; j < 8; ++j) {
    float lo = x[32 * j], hi = x[32 * j];
    for (int l = 1; l < 32; ++l) lo = std::min(lo, x[32 * j + l]), hi = std::max(hi, x[32 * j + l]);
    offset[j] = std::max(0.0f, -lo);
    step[j] = (hi + offset[j]) / float(qmax);
    max_step = std::max(max_step, step[j]);
    max_offset = std::max(max_offset, offset[j]);
  }
  KQuantized k;
  k.d = fp32_to_fp16(max_step / 63.0f);
  k.dmin = fp32_to_fp16(max_offset / 63.0f);
  const float d = fp16_to_fp32(k.d), dmin = fp16_to_fp32(k.dmin);
  for (int j = 0; j < 8; ++j) {
    k.sc[j] = d > 0.0f ? uint8_t(std::min(63.0f, std::round(step[j] / d))) : 0;
    k.mn[j] = dmin > 0.0f ? uint8_t(std::min(63.0f, std::round(offset[j] / dmin))) : 0;
    const float coded_step = d * float(k.sc[j]), coded_offset = dmin * float(k.mn[j]);
    const float inv = coded_step > 0.0f ? 1.0f / coded_step : 0.0f;
    for (int l = 0; l < 32; ++l) {
      const float v = std::round((x[32 * j + l] + coded_offset) * inv);
      q[32 * j + l] = uint8_t(std::clamp(v, 0.0f, float(qmax)));
    }
  }
  return k;
}

}  // namespace ember::quant::ref
