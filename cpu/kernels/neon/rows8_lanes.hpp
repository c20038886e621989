// ARM64 batches of the formats summed in llama.cpp's eight-lane order (quant/lanes.hpp):
// Q8_0 and Q5_0 (32-value blocks, Q8_0 activations) and Q6_K (Q8_K activations), 8
// weight rows at a time. The x86 levels' design (avx2/rows8_lanes.hpp, the rows8 kernel
// of avx2/q6_k.cpp) on 128-bit registers.
//
// The order gives every (row, token) eight float lanes; lane m takes, per block (Q6_K:
// per super-block), the exact integer sum of the values v with (v mod 32) / 4 == m and
// then lane[m] = fma(float(sum), d_w * d_a, lane[m]). Here the codes of 4 rows are
// transposed (4 x 4 dwords) once per block so that register k holds dword k of each
// row, one row per int32 lane; SDOT with a lane index (plain NEON: the activation dword
// broadcast, then dot4) gives each lane its own row's integer sum, and the conversion
// and FMA serve 4 rows. Rows 0-3 and 4-7 take one register each. Integer sums are exact
// in any order, so the float operations are the one-row kernels', lane for lane, and
// the results their bits for every token count. The transposed codes of a block serve
// every token of the call (up to kRows8Tokens per pass; the lanes live on the stack).
//
// Decode (one token) goes through the step kernel's whole-row path (`rows_whole`, via
// `dot_tile_lanes`), as x86 does.
#pragma once

#include <algorithm>

#include "cpu/kernels/neon/blocks256.hpp"
#include "cpu/kernels/neon/blocks32.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

constexpr int kRows8Lanes = 8;
constexpr int kRows8Tokens = 32;

// out[k] lane i = dword k of in[i] (a 4 x 4 transpose of dwords).
inline void transpose4x4(const int8x16_t in[4], int8x16_t out[4]) {
  const int32x4_t a0 = vreinterpretq_s32_s8(in[0]), a1 = vreinterpretq_s32_s8(in[1]);
  const int32x4_t a2 = vreinterpretq_s32_s8(in[2]), a3 = vreinterpretq_s32_s8(in[3]);
  const int64x2_t t0 = vreinterpretq_s64_s32(vtrn1q_s32(a0, a1)), t1 = vreinterpretq_s64_s32(vtrn2q_s32(a0, a1));
  const int64x2_t t2 = vreinterpretq_s64_s32(vtrn1q_s32(a2, a3)), t3 = vreinterpretq_s64_s32(vtrn2q_s32(a2, a3));
  out[0] = vreinterpretq_s8_s64(vtrn1q_s64(t0, t2));
  out[1] = vreinterpretq_s8_s64(vtrn1q_s64(t1, t3));
  out[2] = vreinterpretq_s8_s64(vtrn2q_s64(t0, t2));
  out[3] = vreinterpretq_s8_s64(vtrn2q_s64(t1, t3));
}

// Lane r: the dot of dword r of q with dword L of y (simd.hpp's dot_lane from zero).
template <int L>
inline int32x4_t dot_lane0(int8x16_t q, int8x16_t y) {
  return dot_lane<L>(vdupq_n_s32(0), q, y);
}

// llama.cpp's eight float lanes of 4 rows (lanes[m], lane r: row r) added as
// quant::Lanes8::sum adds them: (v4 + v0), ..., (v7 + v3), then (s0 + s2) + (s1 + s3).
inline float32x4_t lanes8_sum_rows4(const float32x4_t v[8]) {
  const float32x4_t s0 = vaddq_f32(v[4], v[0]), s1 = vaddq_f32(v[5], v[1]);
  const float32x4_t s2 = vaddq_f32(v[6], v[2]), s3 = vaddq_f32(v[7], v[3]);
  return vaddq_f32(vaddq_f32(s0, s2), vaddq_f32(s1, s3));
}

// The 8 rows' lanes of tokens [t0, t0 + nt) to out.
inline void store_lanes(float32x4_t (*lanes)[8][2], int nt, float* out, size_t out_stride) {
  for (int t = 0; t < nt; ++t)
    for (int h = 0; h < 2; ++h) {
      float32x4_t v[8];
      for (int m = 0; m < 8; ++m) v[m] = lanes[t][m][h];
      vst1q_f32(out + size_t(t) * out_stride + 4 * h, lanes8_sum_rows4(v));
    }
}

// Q8_0 / Q5_0: W::load(row, block) gives the block's 32 signed codes in value order.
template <class W>
void rows8_lanes32(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, int n_x,
                   float* out, size_t out_stride, int64_t n) {
  const int64_t nb = n / quant::kQK;
  for (int t0 = 0; t0 < n_x; t0 += kRows8Tokens) {
    const int nt = std::min(kRows8Tokens, n_x - t0);
    float32x4_t lanes[kRows8Tokens][8][2];  // [token][m][rows 4h .. 4h + 3]
    for (int t = 0; t < nt; ++t)
      for (int m = 0; m < 8; ++m) lanes[t][m][0] = lanes[t][m][1] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; ++b) {
      int8x16_t q[2][8];  // q[h][m] lane r: dword m (values 4m .. 4m + 3) of row 4h + r
      float32x4_t d[2];
      for (int h = 0; h < 2; ++h) {
        int8x16_t lo[4], hi[4];
        float dr[4];
        for (int r = 0; r < 4; ++r) {
          const WtCodes c = W::load(w + size_t(4 * h + r) * w_row_bytes, b);
          lo[r] = c.q0;
          hi[r] = c.q1;
          dr[r] = c.d;
        }
        transpose4x4(lo, q[h]);
        transpose4x4(hi, q[h] + 4);
        d[h] = vld1q_f32(dr);
      }
      for (int t = 0; t < nt; ++t) {
        const ActQ8_0 y = ActQ8_0::load(a + size_t(t0 + t) * a_row_bytes, b);
        for (int h = 0; h < 2; ++h) {
          // d_w * d_a, as the step kernel's scalar product.
          const float32x4_t dd = vmulq_n_f32(d[h], y.d);
          const int32x4_t s[8] = {dot_lane0<0>(q[h][0], y.y0), dot_lane0<1>(q[h][1], y.y0),
                                  dot_lane0<2>(q[h][2], y.y0), dot_lane0<3>(q[h][3], y.y0),
                                  dot_lane0<0>(q[h][4], y.y1), dot_lane0<1>(q[h][5], y.y1),
                                  dot_lane0<2>(q[h][6], y.y1), dot_lane0<3>(q[h][7], y.y1)};
          for (int m = 0; m < 8; ++m) lanes[t][m][h] = vfmaq_f32(lanes[t][m][h], vcvtq_f32_s32(s[m]), dd);
        }
      }
    }
    store_lanes(lanes, nt, out + size_t(t0) * out_stride, out_stride);
  }
}

// Q6_K: Unpack(block, q[16]) gives q - 32 of values 16i .. 16i + 15 (sub-block i). Float
// lane m of a super-block sums, over its 8 chunks of 32 values, sc_i times the integer
// dot of dword m % 4 of sub-block i = 2 k + m / 4.
template <void (*Unpack)(const std::byte*, int8x16_t*)>
void rows8_q6_k(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, int n_x, float* out,
                size_t out_stride, int64_t n) {
  constexpr size_t kBlock = sizeof(quant::BlockQ6_K);
  const int64_t nb = n / quant::kQKK;
  for (int t0 = 0; t0 < n_x; t0 += kRows8Tokens) {
    const int nt = std::min(kRows8Tokens, n_x - t0);
    float32x4_t lanes[kRows8Tokens][8][2];
    for (int t = 0; t < nt; ++t)
      for (int m = 0; m < 8; ++m) lanes[t][m][0] = lanes[t][m][1] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; ++b) {
      int8x16_t q[16][2][4];  // [sub-block i][h][dword k], lane r: row 4h + r
      int32x4_t sc[16][2];    // scale of sub-block i, lane r: row 4h + r
      float32x4_t d[2];
      for (int h = 0; h < 2; ++h) {
        int8x16_t codes[4][16];
        alignas(16) int32_t s[16][4];
        float dr[4];
        for (int r = 0; r < 4; ++r) {
          const std::byte* blk = w + size_t(4 * h + r) * w_row_bytes + size_t(b) * kBlock;
          Unpack(blk, codes[r]);
          const auto* s8 = reinterpret_cast<const int8_t*>(blk + offsetof(quant::BlockQ6_K, scales));
          for (int i = 0; i < 16; ++i) s[i][r] = s8[i];
          dr[r] = half_at(blk + offsetof(quant::BlockQ6_K, d));
        }
        for (int i = 0; i < 16; ++i) {
          const int8x16_t in[4] = {codes[0][i], codes[1][i], codes[2][i], codes[3][i]};
          transpose4x4(in, q[i][h]);
          sc[i][h] = vld1q_s32(s[i]);
        }
        d[h] = vld1q_f32(dr);
      }
      for (int t = 0; t < nt; ++t) {
        const ActQ8_K act = ActQ8_K::load(a + size_t(t0 + t) * a_row_bytes, b);
        for (int h = 0; h < 2; ++h) {
          int32x4_t sum[8];
          for (int m = 0; m < 8; ++m) sum[m] = vdupq_n_s32(0);
          for (int i = 0; i < 16; ++i) {
            const int8x16_t y = act.codes(i);
            const int m0 = 4 * (i % 2);
            sum[m0] = vmlaq_s32(sum[m0], dot_lane0<0>(q[i][h][0], y), sc[i][h]);
            sum[m0 + 1] = vmlaq_s32(sum[m0 + 1], dot_lane0<1>(q[i][h][1], y), sc[i][h]);
            sum[m0 + 2] = vmlaq_s32(sum[m0 + 2], dot_lane0<2>(q[i][h][2], y), sc[i][h]);
            sum[m0 + 3] = vmlaq_s32(sum[m0 + 3], dot_lane0<3>(q[i][h][3], y), sc[i][h]);
          }
          // d_a * d_w, as the step kernel's scalar product.
          const float32x4_t dd = vmulq_n_f32(d[h], act.d);
          for (int m = 0; m < 8; ++m) lanes[t][m][h] = vfmaq_f32(lanes[t][m][h], vcvtq_f32_s32(sum[m]), dd);
        }
      }
    }
    store_lanes(lanes, nt, out + size_t(t0) * out_stride, out_stride);
  }
}

using DotTileFn = void (*)(const void*, size_t, int, const void*, size_t, int, float*, size_t, int64_t);
using Rows8Fn = void (*)(const std::byte*, size_t, const std::byte*, size_t, int, float*, size_t, int64_t);

// WeightKernels::dot_tile: one token with `Other` (the step kernel's lane tiles), batches
// with `Rows8` over whole groups of 8 rows and `Other` for the rows after them.
template <Rows8Fn Rows8, DotTileFn Other>
void dot_tile_rows8_lanes(const void* weights, size_t w_row_bytes, int n_w, const void* activations,
                          size_t a_row_bytes, int n_x, float* out, size_t out_stride, int64_t n) {
  if (n_x == 1) return Other(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n);
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(activations);
  int r = 0;
  for (; r + kRows8Lanes <= n_w; r += kRows8Lanes)
    Rows8(w + size_t(r) * w_row_bytes, w_row_bytes, a, a_row_bytes, n_x, out + r, out_stride, n);
  if (r < n_w)
    Other(w + size_t(r) * w_row_bytes, w_row_bytes, n_w - r, activations, a_row_bytes, n_x, out + r, out_stride, n);
}

}  // namespace
}  // namespace ember::cpu::EMBER_NEON_NS
