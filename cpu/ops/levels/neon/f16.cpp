// The NEON level's F16 conversions (FCVTN rounds to nearest even, as fp32_to_fp16; FCVTL
// is exact), for every ARM64 level. The GELU row is the scalar level's (tables.cpp).
#include <arm_neon.h>

#include "common/fp16.hpp"
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

}  // namespace ember::cpu::neon
