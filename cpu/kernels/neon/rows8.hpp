// ARM64 kernels over the rows8 layout (cpu/kernels/repack.hpp: weights repacked at load,
// 8 rows per group, each block a record of the 8 rows' scales and transposed codes) of
// the 4- and 5-bit formats with a free float order: Q4_0 (Q8_0 activations), Q4_1, Q5_1,
// Q4_G128 and Q4_G64 (Q8_1). The x86 levels' design (avx2/rows8_32.hpp, avx512/rows8_repacked.hpp)
// on 128-bit registers: one int32 lane per weight row (rows 0-3 in one register, 4-7 in
// another), the codes of a record's word k dotted with activation values 4k .. 4k + 3 by
// one SDOT with a lane index (dotprod, i8mm; plain NEON broadcasts the lane and uses
// dot4), so that a block's float work (one FMA, one more for the offset formats' m) is
// shared by 4 rows and its codes, unpacked once, by up to 4 tokens.
//
// Per output, each 32-value sub-block's exact integer sum as
// acc = fma(float(sum), d * d_act, acc), sub-blocks in order, then for the offset formats
// acc = fma(m, sum of the sub-blocks' activation sums, acc): the x86 levels' order, the
// same whatever the number of tokens, so one kernel serves decode, prefill and
// backend::SumOrder::batch_invariant. The symmetric format (Q4_0) starts each sub-block's
// integer sum at -8 * (the sum of the activation block's codes), which matmul appends to
// each activation row once per op (Repacked::activation_sums = -8).
//
// C: kBlockBytes, kMin (x = d * q + m with Q8_1 activations; else x = d * (q - kOffset)
// with Q8_0), kOffset, kSub (32-value runs per block sharing d and m), kBits (5: the
// record's qh words, row r's at kQh + 4r, give each value its fifth bit).
#pragma once

#include "cpu/kernels/neon/simd.hpp"
#include "cpu/kernels/repack.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

template <class C>
struct Rows8Rec {
  static constexpr size_t kD = 0, kM = 16, kQh = C::kMin ? 32 : 16, kCodes = kQh + (C::kBits == 5 ? 32 : 0);
  static constexpr size_t kBytes = 8 * C::kBlockBytes;
  static constexpr size_t kActBlock = C::kMin ? sizeof(quant::BlockQ8_1) : sizeof(quant::BlockQ8_0);
  static constexpr size_t kActCodes = C::kMin ? 4 : 2;
  static_assert(kCodes + 128 * size_t(C::kSub) == kBytes, "a record holds exactly the 8 blocks' bytes");
};

// Eight fp16 at p as f32: rows 0-3 in lo, 4-7 in hi.
inline void halves8(const std::byte* p, float32x4_t& lo, float32x4_t& hi) {
  const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(reinterpret_cast<const uint16_t*>(p)));
  lo = vcvt_f32_f16(vget_low_f16(h));
  hi = vcvt_high_f32_f16(h);
}

// Codes of sub-block j of a record: q[h][k] lane r = values 4k .. 4k + 3 of row 4h + r
// (k < 4, low nibbles), values 16 + 4 (k - 4) .. (k >= 4, high nibbles).
template <class C>
inline void load_codes(const std::byte* rec, int j, int8x16_t q[2][8]) {
  const std::byte* c = rec + Rows8Rec<C>::kCodes + 128 * size_t(j);
  for (int k = 0; k < 4; ++k)
    for (int h = 0; h < 2; ++h) {
      const uint8x16_t v = load_u8(c + 32 * k + 16 * h);
      q[h][k] = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0f)));
      q[h][k + 4] = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
    }
  if constexpr (C::kBits == 5) {
    // Bit v of a row's qh is the fifth bit of its value v: values 4k .. 4k + 3 of q[h][k]
    // take bits 4k .. 4k + 3, which a multiply by 2^4 + 2^11 + 2^18 + 2^25 moves to bit 4
    // of bytes 0 .. 3.
    const uint32x4_t spread = vdupq_n_u32(0x02040810), bit4 = vdupq_n_u32(0x10101010), four = vdupq_n_u32(0xf);
    for (int h = 0; h < 2; ++h) {
      uint32x4_t qh = vld1q_u32(reinterpret_cast<const uint32_t*>(rec + Rows8Rec<C>::kQh + 16 * size_t(h)));
      for (int k = 0; k < 8; ++k, qh = vshrq_n_u32(qh, 4)) {
        const uint32x4_t high = vandq_u32(vmulq_u32(vandq_u32(qh, four), spread), bit4);
        q[h][k] = vorrq_s8(q[h][k], vreinterpretq_s8_u32(high));
      }
    }
  }
}

// One sub-block's integer sums for 4 rows against activation codes y0 (values 0-15) and
// y1 (16-31). Exact, so the grouping changes no bit.
inline int32x4_t dot_sub(int32x4_t acc, const int8x16_t q[8], int8x16_t y0, int8x16_t y1) {
  acc = dot_lane<0>(acc, q[0], y0);
  acc = dot_lane<1>(acc, q[1], y0);
  acc = dot_lane<2>(acc, q[2], y0);
  acc = dot_lane<3>(acc, q[3], y0);
  acc = dot_lane<0>(acc, q[4], y1);
  acc = dot_lane<1>(acc, q[5], y1);
  acc = dot_lane<2>(acc, q[6], y1);
  return dot_lane<3>(acc, q[7], y1);
}

// NT tokens (a: the first, rows a_row_bytes apart) against one group of 8 rows at rec0.
template <class C, int NT>
void rows8_tile(const std::byte* rec0, const std::byte* a, size_t a_row_bytes, float* out, size_t out_stride,
                int64_t nb, size_t sums_offset) {
  using R = Rows8Rec<C>;
  float32x4_t acc[NT][2];
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = vdupq_n_f32(0.0f);
  for (int64_t g = 0; g < nb / C::kSub; ++g) {
    const std::byte* rec = rec0 + size_t(g) * R::kBytes;
    float32x4_t d[2];
    halves8(rec + R::kD, d[0], d[1]);
    for (int j = 0; j < C::kSub; ++j) {
      const int64_t b = g * C::kSub + j;
      int8x16_t q[2][8];
      load_codes<C>(rec, j, q);
      for (int t = 0; t < NT; ++t) {
        const std::byte* row = a + size_t(t) * a_row_bytes;
        const std::byte* ab = row + size_t(b) * R::kActBlock;
        const int8x16_t y0 = load_s8(ab + R::kActCodes), y1 = load_s8(ab + R::kActCodes + 16);
        int32x4_t init = vdupq_n_s32(0);
        if constexpr (!C::kMin)
          init = vdupq_n_s32(int32_t(load_u32(row + sums_offset + size_t(b) * sizeof(int32_t))));
        const float da = half_at(ab);
        for (int h = 0; h < 2; ++h)
          acc[t][h] = vfmaq_f32(acc[t][h], vcvtq_f32_s32(dot_sub(init, q[h], y0, y1)), vmulq_n_f32(d[h], da));
      }
    }
    if constexpr (C::kMin) {
      float32x4_t m[2];
      halves8(rec + R::kM, m[0], m[1]);
      for (int t = 0; t < NT; ++t) {
        // The sub-blocks' activation sums s, in order.
        const std::byte* first = a + size_t(t) * a_row_bytes + size_t(g * C::kSub) * R::kActBlock;
        float s = half_at(first + 2);
        for (int j = 1; j < C::kSub; ++j) s += half_at(first + size_t(j) * R::kActBlock + 2);
        for (int h = 0; h < 2; ++h) acc[t][h] = vfmaq_f32(acc[t][h], m[h], vdupq_n_f32(s));
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    vst1q_f32(out + size_t(t) * out_stride, acc[t][0]);
    vst1q_f32(out + size_t(t) * out_stride + 4, acc[t][1]);
  }
}

// WeightKernels::Repacked::dot_tile: whole groups of the rows8 layout (n_w a multiple of
// 8), every token count, tokens in tiles of 4 sharing each group's unpacked codes.
template <class C>
void dot_tile_rows8_repacked(const void* weights, size_t w_row_bytes, int n_w, const void* activations,
                             size_t a_row_bytes, int n_x, float* out, size_t out_stride, int64_t n) {
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(activations);
  const int64_t nb = n / quant::kQK;
  const size_t sums_offset = C::kMin ? 0 : activation_sums_offset(n);
  for (int r = 0; r < n_w; r += 8) {
    const std::byte* rec0 = w + size_t(r) * w_row_bytes;
    int t = 0;
    for (; t + 4 <= n_x; t += 4)
      rows8_tile<C, 4>(rec0, a + size_t(t) * a_row_bytes, a_row_bytes, out + size_t(t) * out_stride + r, out_stride,
                       nb, sums_offset);
    const std::byte* at = a + size_t(t) * a_row_bytes;
    float* ot = out + size_t(t) * out_stride + r;
    switch (n_x - t) {
      case 3: rows8_tile<C, 3>(rec0, at, a_row_bytes, ot, out_stride, nb, sums_offset); break;
      case 2: rows8_tile<C, 2>(rec0, at, a_row_bytes, ot, out_stride, nb, sums_offset); break;
      case 1: rows8_tile<C, 1>(rec0, at, a_row_bytes, ot, out_stride, nb, sums_offset); break;
      default: break;
    }
  }
}

// The Repacked entry of format C at this level. The i8mm level has none: its file-layout
// tiles use SMMLA (twice SDOT's multiply-adds per instruction) for prefill, which the
// rows8 kernels would give up for every token count; which way is faster on a real ARM
// CPU is not measured (docs/arm.md).
template <class C>
constexpr WeightKernels::Repacked rows8_repacked() {
#if defined(__ARM_FEATURE_MATMUL_INT8)
  return {};
#else
  return {dot_tile_rows8_repacked<C>, 4, nullptr, C::kMin ? 0 : -C::kOffset};
#endif
}

}  // namespace
}  // namespace ember::cpu::EMBER_NEON_NS
