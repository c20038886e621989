// The NEON level's F16/F32 attention row kernels (OpKernels::dot_f16 ... axpy_f32), for
// every ARM64 level. axpy is one FMA per element, as the scalar kernel, so the same bits.
#include <arm_neon.h>

#include <cmath>

#include "common/fp16.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::neon {

float dot_f16(const float* q, const uint16_t* k, int n) {
  float32x4_t a0 = vdupq_n_f32(0.0f), a1 = vdupq_n_f32(0.0f);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    a0 = vfmaq_f32(a0, vld1q_f32(q + i), vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(k + i))));
    a1 = vfmaq_f32(a1, vld1q_f32(q + i + 4), vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(k + i + 4))));
  }
  float s = vaddvq_f32(vaddq_f32(a0, a1));
  for (; i < n; ++i) s += q[i] * fp16_to_fp32(k[i]);
  return s;
}
void axpy_f16(float* acc, float w, const uint16_t* v, int n) {
  int i = 0;
  for (; i + 4 <= n; i += 4)
    vst1q_f32(acc + i, vfmaq_n_f32(vld1q_f32(acc + i), vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(v + i))), w));
  for (; i < n; ++i) acc[i] = std::fma(w, fp16_to_fp32(v[i]), acc[i]);
}
float dot_f32(const float* q, const float* k, int n) {
  float32x4_t a0 = vdupq_n_f32(0.0f), a1 = vdupq_n_f32(0.0f);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    a0 = vfmaq_f32(a0, vld1q_f32(q + i), vld1q_f32(k + i));
    a1 = vfmaq_f32(a1, vld1q_f32(q + i + 4), vld1q_f32(k + i + 4));
  }
  float s = vaddvq_f32(vaddq_f32(a0, a1));
  for (; i < n; ++i) s += q[i] * k[i];
  return s;
}
void axpy_f32(float* acc, float w, const float* v, int n) {
  int i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(acc + i, vfmaq_n_f32(vld1q_f32(acc + i), vld1q_f32(v + i), w));
  for (; i < n; ++i) acc[i] = std::fma(w, v[i], acc[i]);
}

}  // namespace ember::cpu::neon
