// The NEON level's lanes16 / lanes64 attention products (levels/lanes16.hpp), for every
// ARM64 level: lanes 4i .. 4i + 3 in v[i]; sum() adds as Lanes16Scalar::sum.
#include <arm_neon.h>

#include "cpu/ops/levels/lanes16.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::neon {
namespace {

struct Lanes16Neon {
  float32x4_t v[4];
  static Lanes16Neon zero() { return {{vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}}; }
  static Lanes16Neon load(const float* p) {
    return {{vld1q_f32(p), vld1q_f32(p + 4), vld1q_f32(p + 8), vld1q_f32(p + 12)}};
  }
  static Lanes16Neon load(const uint16_t* p) {
    Lanes16Neon r;
    for (int i = 0; i < 4; ++i) r.v[i] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p + 4 * i)));
    return r;
  }
  static Lanes16Neon fma(Lanes16Neon a, Lanes16Neon b, Lanes16Neon c) {
    for (int i = 0; i < 4; ++i) c.v[i] = vfmaq_f32(c.v[i], a.v[i], b.v[i]);
    return c;
  }
  static Lanes16Neon add(Lanes16Neon a, Lanes16Neon b) {
    for (int i = 0; i < 4; ++i) a.v[i] = vaddq_f32(a.v[i], b.v[i]);
    return a;
  }
  // (l, l + 8), (l, l + 4), (l, l + 2), (l, l + 1), as Lanes16Scalar::sum.
  float sum() const {
    const float32x4_t t = vaddq_f32(vaddq_f32(v[0], v[2]), vaddq_f32(v[1], v[3]));
    const float32x2_t u = vadd_f32(vget_low_f32(t), vget_high_f32(t));
    return vget_lane_f32(u, 0) + vget_lane_f32(u, 1);
  }
};

}  // namespace

float dot64_f16(const float* q, const uint16_t* k, int n) { return dot_lanes64<Lanes16Neon>(q, k, n); }
float dot64_f32(const float* q, const float* k, int n) { return dot_lanes64<Lanes16Neon>(q, k, n); }
float dot16_f16(const float* q, const uint16_t* k, int n) { return dot_lanes16<Lanes16Neon>(q, k, n); }
float dot16_f32(const float* q, const float* k, int n) { return dot_lanes16<Lanes16Neon>(q, k, n); }
// 2 x 2 tiles: 16 accumulator registers of NEON's 32 (speed not measured on ARM).
void gemm16(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  gemm_lanes16<Lanes16Neon, 2, 2>(m, n, k, a, lda, b, ldb, c, ldc);
}

}  // namespace ember::cpu::neon
