// The NEON level's quantized KV-cache row kernels (OpKernels::kv_rows), for every ARM64
// level. `n` is always a whole number of groups (G = 32 or 64 values), so the group
// loops need no tails; only dot_f32 / axpy_f32 take tails, to be safe on any n.
//
// Codes are widened in registers: INT8 with vmovl_s8 / vmovl_s16, INT4 nibbles with
// vand / vshr then vmovl_u8 / vmovl_u16, converted with vcvtq_f32. Orders, as the x86
// levels (cpu/ops/kv_rows.hpp: "up to float summation order"):
//  - dots keep four-lane accumulators and add their lanes at the end (vaddvq); INT4 dots
//    use d * sum(q * c) + m * sum(q) per group, as AVX2 and AVX-512;
//  - axpy is one FMA per value (INT4: acc + w m first, then the FMA with w d, as AVX2);
//  - decode_stored is the reference decoder's d * c (+ m): d is an F16 value and |c| <=
//    127, so d * c is exact in f32 and the product's rounding (or an FMA's) changes
//    nothing: the same bits as quant::dequantize_row.
#include <arm_neon.h>

#include "cpu/ops/levels/kv_rows_common.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::neon {
namespace {

// The F16 value at p (FCVTL, exact).
inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

// 16 values as four vectors of four floats, in order.
struct F32x16 {
  float32x4_t v[4];
};
// The 16 int8 codes at c.
inline F32x16 i8x16(const uint8_t* c) {
  const int8x16_t codes = vld1q_s8(reinterpret_cast<const int8_t*>(c));
  const int16x8_t lo = vmovl_s8(vget_low_s8(codes)), hi = vmovl_high_s8(codes);
  return {{vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), vcvtq_f32_s32(vmovl_high_s16(lo)),
           vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), vcvtq_f32_s32(vmovl_high_s16(hi))}};
}
// 16 unsigned bytes (here 4-bit codes, 0..15).
inline F32x16 u8x16(uint8x16_t codes) {
  const uint16x8_t lo = vmovl_u8(vget_low_u8(codes)), hi = vmovl_high_u8(codes);
  return {{vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo))), vcvtq_f32_u32(vmovl_high_u16(lo)),
           vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi))), vcvtq_f32_u32(vmovl_high_u16(hi))}};
}
// The 32 nibbles of the 16 bytes at p: low nibbles (values k .. k + 15 of the group) and
// high nibbles (values G / 2 + k ..), quant/kv_formats.hpp's order.
inline void nibbles(const uint8_t* p, F32x16& lo, F32x16& hi) {
  const uint8x16_t bytes = vld1q_u8(p);
  lo = u8x16(vandq_u8(bytes, vdupq_n_u8(15)));
  hi = u8x16(vshrq_n_u8(bytes, 4));
}

// The axpy and decode steps on 16 values: acc += scale * x (one FMA), or with `add`
// added to acc first; out = x * scale, or x * scale + add.
inline void axpy16(float* acc, float scale, const F32x16& x) {
  for (int i = 0; i < 4; ++i) vst1q_f32(acc + 4 * i, vfmaq_n_f32(vld1q_f32(acc + 4 * i), x.v[i], scale));
}
inline void axpy16(float* acc, float scale, const F32x16& x, float32x4_t add) {
  for (int i = 0; i < 4; ++i)
    vst1q_f32(acc + 4 * i, vfmaq_n_f32(vaddq_f32(vld1q_f32(acc + 4 * i), add), x.v[i], scale));
}
inline void scaled16(float* out, float scale, const F32x16& x) {
  for (int i = 0; i < 4; ++i) vst1q_f32(out + 4 * i, vmulq_n_f32(x.v[i], scale));
}
inline void scaled16(float* out, float scale, const F32x16& x, float32x4_t add) {
  for (int i = 0; i < 4; ++i) vst1q_f32(out + 4 * i, vaddq_f32(vmulq_n_f32(x.v[i], scale), add));
}

struct Kernels {
  template <int G>
  static float dot_q8(const float* q, const void* row, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    float32x4_t total = vdupq_n_f32(0.0f);
    for (int g = 0; g < n / G; ++g, b += G + 2, q += G) {
      float32x4_t s[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
      for (int j = 0; j < G; j += 16) {
        const F32x16 c = i8x16(b + 2 + j);
        for (int i = 0; i < 4; ++i) s[i] = vfmaq_f32(s[i], vld1q_f32(q + j + 4 * i), c.v[i]);
      }
      total = vfmaq_n_f32(total, vaddq_f32(vaddq_f32(s[0], s[1]), vaddq_f32(s[2], s[3])), half_at(b));
    }
    return vaddvq_f32(total);
  }
  template <int G>
  static void axpy_q8(float* acc, float w, const void* row, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int g = 0; g < n / G; ++g, b += G + 2, acc += G) {
      const float wd = w * half_at(b);
      for (int j = 0; j < G; j += 16) axpy16(acc + j, wd, i8x16(b + 2 + j));
    }
  }
  template <int G>
  static void decode_q8(const void* row, float* out, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int g = 0; g < n / G; ++g, b += G + 2, out += G) {
      const float d = half_at(b);
      for (int j = 0; j < G; j += 16) scaled16(out + j, d, i8x16(b + 2 + j));
    }
  }
  template <int G>
  static float dot_q4(const float* q, const void* row, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    float32x4_t total = vdupq_n_f32(0.0f);
    for (int g = 0; g < n / G; ++g, b += G / 2 + 4, q += G) {
      float32x4_t sc0 = vdupq_n_f32(0.0f), sc1 = vdupq_n_f32(0.0f), sq = vdupq_n_f32(0.0f);
      for (int k = 0; k < G / 2; k += 16) {
        F32x16 lo, hi;
        nibbles(b + 4 + k, lo, hi);
        const float* ql = q + k;
        const float* qh = q + G / 2 + k;
        for (int i = 0; i < 4; ++i) {
          const float32x4_t q0 = vld1q_f32(ql + 4 * i), q1 = vld1q_f32(qh + 4 * i);
          sc0 = vfmaq_f32(sc0, q0, lo.v[i]);
          sc1 = vfmaq_f32(sc1, q1, hi.v[i]);
          sq = vaddq_f32(sq, vaddq_f32(q0, q1));
        }
      }
      total = vfmaq_n_f32(total, vaddq_f32(sc0, sc1), half_at(b));
      total = vfmaq_n_f32(total, sq, half_at(b + 2));
    }
    return vaddvq_f32(total);
  }
  template <int G>
  static void axpy_q4(float* acc, float w, const void* row, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int g = 0; g < n / G; ++g, b += G / 2 + 4, acc += G) {
      const float wd = w * half_at(b);
      const float32x4_t wm = vdupq_n_f32(w * half_at(b + 2));
      for (int k = 0; k < G / 2; k += 16) {
        F32x16 lo, hi;
        nibbles(b + 4 + k, lo, hi);
        axpy16(acc + k, wd, lo, wm);
        axpy16(acc + G / 2 + k, wd, hi, wm);
      }
    }
  }
  template <int G>
  static void decode_q4(const void* row, float* out, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int g = 0; g < n / G; ++g, b += G / 2 + 4, out += G) {
      const float d = half_at(b);
      const float32x4_t m = vdupq_n_f32(half_at(b + 2));
      for (int k = 0; k < G / 2; k += 16) {
        F32x16 lo, hi;
        nibbles(b + 4 + k, lo, hi);
        scaled16(out + k, d, lo, m);
        scaled16(out + G / 2 + k, d, hi, m);
      }
    }
  }
  static float dot_f32(const float* q, const float* x, int n) {
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = vdupq_n_f32(0.0f), a2 = vdupq_n_f32(0.0f), a3 = vdupq_n_f32(0.0f);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
      a0 = vfmaq_f32(a0, vld1q_f32(q + i), vld1q_f32(x + i));
      a1 = vfmaq_f32(a1, vld1q_f32(q + i + 4), vld1q_f32(x + i + 4));
      a2 = vfmaq_f32(a2, vld1q_f32(q + i + 8), vld1q_f32(x + i + 8));
      a3 = vfmaq_f32(a3, vld1q_f32(q + i + 12), vld1q_f32(x + i + 12));
    }
    for (; i + 4 <= n; i += 4) a0 = vfmaq_f32(a0, vld1q_f32(q + i), vld1q_f32(x + i));
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; ++i) s += q[i] * x[i];
    return s;
  }
  static void axpy_f32(float* acc, float w, const float* x, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(acc + i, vfmaq_n_f32(vld1q_f32(acc + i), vld1q_f32(x + i), w));
    for (; i < n; ++i) acc[i] += w * x[i];
  }
};

}  // namespace

const KvRowKernels* kv_rows(quant::DType type) { return KvRowTables<Kernels>::of(type); }

}  // namespace ember::cpu::neon
