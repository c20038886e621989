// The NEON level's F16 conversions (FCVTN rounds to nearest even, as fp32_to_fp16; FCVTL
// is exact) and the F16-table GELU row, for every ARM64 level.
#include <arm_neon.h>

#include "common/fp16.hpp"
#include "cpu/ops/levels/gelu_f16.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::neon {

void to_f16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void f16_to_f32(const void* row, float* out, int n) {
  const auto* h = static_cast<const uint16_t*>(row);
  int i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h + i))));
  for (; i < n; ++i) out[i] = fp16_to_fp32(h[i]);
}

// gelu_f16 eight at a time: FCVTN rounds the inputs to their F16 table indices, the
// table's values are gathered (NEON has no gather) and widened by FCVTL, and the
// +-10 cut-offs are selected by compares. The same bits as the scalar row.
void gelu_glu_row(const float* gate, const float* up, float* out, int64_t n) {
  const uint16_t* table = scalar::gelu_f16_table();
  const float32x4_t lo = vdupq_n_f32(-10.0f), hi = vdupq_n_f32(10.0f), zero = vdupq_n_f32(0.0f);
  alignas(16) uint16_t idx[8], val[8];
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t x0 = vld1q_f32(gate + i), x1 = vld1q_f32(gate + i + 4);
    vst1q_u16(idx, vreinterpretq_u16_f16(vcvt_high_f16_f32(vcvt_f16_f32(x0), x1)));
    for (int l = 0; l < 8; ++l) val[l] = table[idx[l]];
    const float16x8_t g16 = vreinterpretq_f16_u16(vld1q_u16(val));
    float32x4_t g0 = vcvt_f32_f16(vget_low_f16(g16)), g1 = vcvt_high_f32_f16(g16);
    g0 = vbslq_f32(vcleq_f32(x0, lo), zero, g0);
    g1 = vbslq_f32(vcleq_f32(x1, lo), zero, g1);
    g0 = vbslq_f32(vcgeq_f32(x0, hi), x0, g0);
    g1 = vbslq_f32(vcgeq_f32(x1, hi), x1, g1);
    vst1q_f32(out + i, vmulq_f32(g0, vld1q_f32(up + i)));
    vst1q_f32(out + i + 4, vmulq_f32(g1, vld1q_f32(up + i + 4)));
  }
  for (; i < n; ++i) out[i] = gelu_f16(table, gate[i]) * up[i];
}

}  // namespace ember::cpu::neon
