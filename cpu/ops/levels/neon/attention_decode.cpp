// The NEON level's fused decode-attention kernels (OpKernels::scores_f16 / pv_f16,
// scores_q8 / pv_q8, scores_q4 / pv_q4; attention_flash.cpp's lone-token path), for every
// ARM64 level. As the x86 levels' (cpu/ops/levels/avx512/attention_decode.cpp), they
// read the cache rows where they lie in the pages (F16, INT8 g32/g64, INT4 g32/g64 in
// its stored domain y = d * code + m) and decode each chunk once for all the query heads
// of the group: no f32 copy of a tile, no call per row.
//
//  - Scores take the x86 "dims across the lanes" form, which on 4-lane registers costs
//    almost nothing to reduce: 4 keys at a time are decoded into a [4][head_dim] f32
//    block on the stack; each pass of up to 4 query heads keeps one accumulator per
//    (head, key), FMAs over the dims, and 3 pairwise adds turn a head's 4 accumulators
//    into its 4 scores.
//  - P.V walks blocks of kPvRows value rows; per 16-column slice and up to 4 heads, 16
//    accumulators stay in registers over the block, each row's slice is decoded once
//    for all of them, and the probabilities come in as scalars of a lane-wise FMA.
// Decoding is exact where the reference's is (F16 -> f32; d * code for INT8); INT4 is
// d * code, then + m, as the reference decoder. Sums are in f32 in this file's own order.
#include <arm_neon.h>

#include <algorithm>
#include <cstring>

#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::neon {
namespace {

constexpr int kMaxHeadDim = 512;
constexpr int kPvRows = 32;

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

// 16 values of a row from column c, as 4 vectors of 4 floats, for each cache type.
struct F16Row {
  const uint16_t* const* rows;
  void decode16(int j, int c, float32x4_t v[4]) const {
    const float16x8_t a = vreinterpretq_f16_u16(vld1q_u16(rows[j] + c));
    const float16x8_t b = vreinterpretq_f16_u16(vld1q_u16(rows[j] + c + 8));
    v[0] = vcvt_f32_f16(vget_low_f16(a));
    v[1] = vcvt_high_f32_f16(a);
    v[2] = vcvt_f32_f16(vget_low_f16(b));
    v[3] = vcvt_high_f32_f16(b);
  }
};

struct Q8Row {
  const uint8_t* const* rows;
  int gsize;
  void decode16(int j, int c, float32x4_t v[4]) const {
    const uint8_t* block = rows[j] + c / gsize * (gsize + 2);
    const float32x4_t d = vdupq_n_f32(half_at(block));
    const int8x16_t codes = vld1q_s8(reinterpret_cast<const int8_t*>(block + 2 + c % gsize));
    const int16x8_t lo = vmovl_s8(vget_low_s8(codes)), hi = vmovl_high_s8(codes);
    v[0] = vmulq_f32(d, vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))));
    v[1] = vmulq_f32(d, vcvtq_f32_s32(vmovl_high_s16(lo)));
    v[2] = vmulq_f32(d, vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))));
    v[3] = vmulq_f32(d, vcvtq_f32_s32(vmovl_high_s16(hi)));
  }
};

// Element e of an INT4 block: the low nibble of byte e (e < G / 2) or the high nibble of
// byte e - G / 2; 16 columns from a multiple of 16 lie in one half.
struct Q4Row {
  const uint8_t* const* rows;
  int gsize;
  void decode16(int j, int c, float32x4_t v[4]) const {
    const int half = gsize / 2, e = c % gsize;
    const uint8_t* block = rows[j] + c / gsize * (half + 4);
    const float32x4_t d = vdupq_n_f32(half_at(block)), m = vdupq_n_f32(half_at(block + 2));
    const uint8x16_t bytes = vld1q_u8(block + 4 + (e < half ? e : e - half));
    const uint8x16_t codes = e < half ? vandq_u8(bytes, vdupq_n_u8(15)) : vshrq_n_u8(bytes, 4);
    const uint16x8_t lo = vmovl_u8(vget_low_u8(codes)), hi = vmovl_high_u8(codes);
    const uint32x4_t w[4] = {vmovl_u16(vget_low_u16(lo)), vmovl_high_u16(lo), vmovl_u16(vget_low_u16(hi)),
                             vmovl_high_u16(hi)};
    for (int x = 0; x < 4; ++x) v[x] = vaddq_f32(vmulq_f32(d, vcvtq_f32_u32(w[x])), m);
  }
};

// s[g][j0 .. j0 + jn) for HG heads from the 4 decoded keys (zeros past jn).
template <int HG>
inline void scores4(const float* q, int hd, const float* keys, float scale, float* s, int lds, int jn) {
  float32x4_t acc[HG][4];
  for (int g = 0; g < HG; ++g)
    for (int j = 0; j < 4; ++j) acc[g][j] = vdupq_n_f32(0.0f);
  for (int d = 0; d < hd; d += 4) {
    float32x4_t k[4];
    for (int j = 0; j < 4; ++j) k[j] = vld1q_f32(keys + j * hd + d);
    for (int g = 0; g < HG; ++g) {
      const float32x4_t qv = vld1q_f32(q + g * hd + d);
      for (int j = 0; j < 4; ++j) acc[g][j] = vfmaq_f32(acc[g][j], qv, k[j]);
    }
  }
  for (int g = 0; g < HG; ++g) {
    const float32x4_t sums =
        vmulq_n_f32(vpaddq_f32(vpaddq_f32(acc[g][0], acc[g][1]), vpaddq_f32(acc[g][2], acc[g][3])), scale);
    float* out = s + g * lds;
    if (jn == 4) {
      vst1q_f32(out, sums);
    } else {
      alignas(16) float tmp[4];
      vst1q_f32(tmp, sums);
      for (int j = 0; j < jn; ++j) out[j] = tmp[j];
    }
  }
}

template <class Row>
void scores_by_dims(const Row& row, const float* q, int group, int hd, int n, float scale, float* s, int lds) {
  alignas(16) float keys[4 * kMaxHeadDim];
  for (int j0 = 0; j0 < n; j0 += 4) {
    const int jn = std::min(4, n - j0);
    for (int j = 0; j < 4; ++j) {
      float* dst = keys + j * hd;
      for (int c = 0; c < hd; c += 16) {
        float32x4_t v[4];
        if (j < jn) {
          row.decode16(j0 + j, c, v);
        } else {
          v[0] = v[1] = v[2] = v[3] = vdupq_n_f32(0.0f);
        }
        for (int x = 0; x < 4; ++x) vst1q_f32(dst + c + 4 * x, v[x]);
      }
    }
    float* sj = s + j0;
    int g = 0;
    for (; g + 4 <= group; g += 4) scores4<4>(q + g * hd, hd, keys, scale, sj + g * lds, lds, jn);
    for (; g + 2 <= group; g += 2) scores4<2>(q + g * hd, hd, keys, scale, sj + g * lds, lds, jn);
    for (; g < group; ++g) scores4<1>(q + g * hd, hd, keys, scale, sj + g * lds, lds, jn);
  }
}

// acc[g][c .. c + 16) += p[g][j] v_j[c .. c + 16) for HG heads over n rows.
template <int HG, class Row>
inline void pv_slice(const Row& row, const float* p, int ldp, int hd, int j0, int n, float* acc, int c) {
  float32x4_t a[HG][4];
  for (int g = 0; g < HG; ++g)
    for (int x = 0; x < 4; ++x) a[g][x] = vld1q_f32(acc + g * hd + c + 4 * x);
  for (int j = j0; j < j0 + n; ++j) {
    float32x4_t v[4];
    row.decode16(j, c, v);
    for (int g = 0; g < HG; ++g) {
      const float w = p[g * ldp + j];
      for (int x = 0; x < 4; ++x) a[g][x] = vfmaq_n_f32(a[g][x], v[x], w);
    }
  }
  for (int g = 0; g < HG; ++g)
    for (int x = 0; x < 4; ++x) vst1q_f32(acc + g * hd + c + 4 * x, a[g][x]);
}

template <class Row>
void pv_rows(const Row& row, const float* p, int ldp, int group, int hd, int n, float* acc) {
  for (int j0 = 0; j0 < n; j0 += kPvRows) {
    const int jn = std::min(kPvRows, n - j0);
    for (int c = 0; c < hd; c += 16) {
      int g = 0;
      for (; g + 4 <= group; g += 4) pv_slice<4>(row, p + g * ldp, ldp, hd, j0, jn, acc + g * hd, c);
      for (; g + 2 <= group; g += 2) pv_slice<2>(row, p + g * ldp, ldp, hd, j0, jn, acc + g * hd, c);
      for (; g < group; ++g) pv_slice<1>(row, p + g * ldp, ldp, hd, j0, jn, acc + g * hd, c);
    }
  }
}

}  // namespace

void scores_f16(const float* q, int group, int hd, const uint16_t* const* rows, int n, float scale, float* s,
                int lds) {
  scores_by_dims(F16Row{rows}, q, group, hd, n, scale, s, lds);
}

void pv_f16(const float* p, int ldp, int group, int hd, const uint16_t* const* rows, int n, float* acc) {
  pv_rows(F16Row{rows}, p, ldp, group, hd, n, acc);
}

void scores_q8(const float* q, int group, int hd, int gsize, const uint8_t* const* rows, int n, float scale,
               float* s, int lds) {
  scores_by_dims(Q8Row{rows, gsize}, q, group, hd, n, scale, s, lds);
}

void pv_q8(const float* p, int ldp, int group, int hd, int gsize, const uint8_t* const* rows, int n, float* acc) {
  pv_rows(Q8Row{rows, gsize}, p, ldp, group, hd, n, acc);
}

void scores_q4(const float* q, int group, int hd, int gsize, const uint8_t* const* rows, int n, float scale,
               float* s, int lds) {
  scores_by_dims(Q4Row{rows, gsize}, q, group, hd, n, scale, s, lds);
}

void pv_q4(const float* p, int ldp, int group, int hd, int gsize, const uint8_t* const* rows, int n, float* acc) {
  pv_rows(Q4Row{rows, gsize}, p, ldp, group, hd, n, acc);
}

}  // namespace ember::cpu::neon
