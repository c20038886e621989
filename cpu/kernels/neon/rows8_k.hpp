// ARM64 kernels of Q4_K and Q5_K over the rows8 layout (cpu/kernels/repack.hpp: per
// super-block of 8 rows one record of the rows' d, dmin, scale words and transposed
// code words). The x86 levels' design (avx2/rows8_k.hpp) on 128-bit registers, as
// rows8.hpp is for the 32-value formats: one int32 lane per weight row (rows 0-3 in one
// register, 4-7 in another); code word k of a sub-block dotted with activation values
// 4k .. 4k + 3 by one SDOT with a lane index (dot_lane); per sub-block j and row the
// exact sc_j * dot_j, per sub-block pair the exact mins term mn_j * (bsums of j); each
// pair's codes unpacked once for a tile of up to 4 tokens.
//
// Float order, per token and row (the integer sums are exact, so only the FMAs count):
// kGrouped: after every pair p, acc = fma(float(pair sum), d * d_act, acc) and
// min = fma(float(pair mins), dmin * d_act, min) (llama.cpp's grouped Q4_K order,
// q4_k.cpp's StepGrouped); otherwise the same once per super-block (Step: llama.cpp's
// per-block Q4_K order; Q5_K has no order to keep and takes this one). The result is
// acc - min. So Q4_K gives the file-layout kernels' bits, and a token's result does
// not depend on the other tokens of the call.
#pragma once

#include "cpu/kernels/neon/rows8.hpp"
#include "cpu/kernels/neon/simd.hpp"
#include "cpu/kernels/repack.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

// The 6-bit scales and mins of one record as int32 lanes: sc[h][j] lane r = sc_j of row
// 4h + r, mn[h][j] likewise (quant::unpack_k_scales' 12-byte packing, unpacked for four
// rows at once from the record's scale words: word w of row r at kScales + 32w + 4r).
template <int kBits>
inline void record_scales_k(const std::byte* rec, int32x4_t sc[2][8], int32x4_t mn[2][8]) {
  using R = RecordK<kBits>;
  for (int h = 0; h < 2; ++h) {
    const uint8x16_t s0 = load_u8(rec + R::kScales + 16 * h), s1 = load_u8(rec + R::kScales + 32 + 16 * h);
    const uint8x16_t s2 = load_u8(rec + R::kScales + 64 + 16 * h);
    const uint8x16_t low6 = vdupq_n_u8(0x3f), low4 = vdupq_n_u8(0x0f), top2 = vdupq_n_u8(0x30);
    // Byte j of each lane: sc_j / mn_j (lo) and sc_{j+4} / mn_{j+4} (hi), j < 4.
    const uint32x4_t sc_lo = vreinterpretq_u32_u8(vandq_u8(s0, low6));
    const uint32x4_t mn_lo = vreinterpretq_u32_u8(vandq_u8(s1, low6));
    const uint32x4_t sc_hi = vreinterpretq_u32_u8(vorrq_u8(vandq_u8(s2, low4), vandq_u8(vshrq_n_u8(s0, 2), top2)));
    const uint32x4_t mn_hi = vreinterpretq_u32_u8(vorrq_u8(vshrq_n_u8(s2, 4), vandq_u8(vshrq_n_u8(s1, 2), top2)));
    const uint32x4_t byte = vdupq_n_u32(0xff);
    for (int j = 0; j < 4; ++j) {
      const int32x4_t shift = vdupq_n_s32(-8 * j);
      sc[h][j] = vreinterpretq_s32_u32(vandq_u32(vshlq_u32(sc_lo, shift), byte));
      sc[h][j + 4] = vreinterpretq_s32_u32(vandq_u32(vshlq_u32(sc_hi, shift), byte));
      mn[h][j] = vreinterpretq_s32_u32(vandq_u32(vshlq_u32(mn_lo, shift), byte));
      mn[h][j + 4] = vreinterpretq_s32_u32(vandq_u32(vshlq_u32(mn_hi, shift), byte));
    }
  }
}

// The codes of sub-block pair p of a record: lo[h][k] lane r = values 4k .. 4k + 3 of
// sub-block 2p of row 4h + r, hi[h][k] the same of sub-block 2p + 1 (5 bits: with bit j
// of the row's qh bytes 4k .. 4k + 3 as bit 4, j the sub-block).
template <int kBits>
inline void load_pair_codes(const std::byte* rec, int p, int8x16_t lo[2][8], int8x16_t hi[2][8]) {
  using R = RecordK<kBits>;
  const std::byte* c = rec + R::kCodes + 256 * size_t(p);
  for (int k = 0; k < 8; ++k)
    for (int h = 0; h < 2; ++h) {
      const uint8x16_t v = load_u8(c + 32 * k + 16 * h);
      uint8x16_t l = vandq_u8(v, vdupq_n_u8(0x0f)), u = vshrq_n_u8(v, 4);
      if constexpr (kBits == 5) {
        const uint8x16_t qh = load_u8(rec + R::kQh + 32 * k + 16 * h), bit4 = vdupq_n_u8(0x10);
        l = vorrq_u8(l, vandq_u8(vshlq_u8(qh, vdupq_n_s8(int8_t(4 - 2 * p))), bit4));
        u = vorrq_u8(u, vandq_u8(vshlq_u8(qh, vdupq_n_s8(int8_t(3 - 2 * p))), bit4));
      }
      lo[h][k] = vreinterpretq_s8_u8(l);
      hi[h][k] = vreinterpretq_s8_u8(u);
    }
}

// NT tokens (a: the first, Q8_K rows a_row_bytes apart) against one group of 8 rows at rec0.
template <int kBits, bool kGrouped, int NT>
void rows8_k_tile(const std::byte* rec0, const std::byte* a, size_t a_row_bytes, float* out, size_t out_stride,
                  int64_t nb) {
  using R = RecordK<kBits>;
  constexpr size_t kActBlock = sizeof(quant::BlockQ8_K);
  float32x4_t acc[NT][2], acc_min[NT][2];
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < 2; ++h) acc[t][h] = acc_min[t][h] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* rec = rec0 + size_t(b) * R::kBytes;
    int32x4_t sc[2][8], mn[2][8];
    record_scales_k<kBits>(rec, sc, mn);
    float32x4_t d[2], dmin[2];
    halves8(rec + R::kD, d[0], d[1]);
    halves8(rec + R::kDmin, dmin[0], dmin[1]);
    float32x4_t dd[NT][2], ddmin[NT][2];
    int32x4_t isum[NT][2], imin[NT][2];
    for (int t = 0; t < NT; ++t) {
      const float da = load_f32(a + size_t(t) * a_row_bytes + size_t(b) * kActBlock);
      for (int h = 0; h < 2; ++h) {
        dd[t][h] = vmulq_n_f32(d[h], da);
        ddmin[t][h] = vmulq_n_f32(dmin[h], da);
        isum[t][h] = imin[t][h] = vdupq_n_s32(0);
      }
    }
    for (int p = 0; p < 4; ++p) {
      int8x16_t lo[2][8], hi[2][8];
      load_pair_codes<kBits>(rec, p, lo, hi);
      for (int t = 0; t < NT; ++t) {
        const std::byte* ab = a + size_t(t) * a_row_bytes + size_t(b) * kActBlock;
        const std::byte* qs = ab + offsetof(quant::BlockQ8_K, qs) + 64 * size_t(p);
        const auto* bs = reinterpret_cast<const int16_t*>(ab + offsetof(quant::BlockQ8_K, bsums)) + 4 * p;
        const int8x16_t y0 = load_s8(qs), y1 = load_s8(qs + 16), y2 = load_s8(qs + 32), y3 = load_s8(qs + 48);
        const int32_t bsum_lo = int32_t(bs[0]) + bs[1], bsum_hi = int32_t(bs[2]) + bs[3];
        for (int h = 0; h < 2; ++h) {
          const int32x4_t zero = vdupq_n_s32(0);
          int32x4_t s = vmulq_s32(dot_sub(zero, lo[h], y0, y1), sc[h][2 * p]);
          s = vmlaq_s32(s, dot_sub(zero, hi[h], y2, y3), sc[h][2 * p + 1]);
          const int32x4_t m = vmlaq_n_s32(vmulq_n_s32(mn[h][2 * p], bsum_lo), mn[h][2 * p + 1], bsum_hi);
          if constexpr (kGrouped) {
            acc[t][h] = vfmaq_f32(acc[t][h], vcvtq_f32_s32(s), dd[t][h]);
            acc_min[t][h] = vfmaq_f32(acc_min[t][h], vcvtq_f32_s32(m), ddmin[t][h]);
          } else {
            isum[t][h] = vaddq_s32(isum[t][h], s);
            imin[t][h] = vaddq_s32(imin[t][h], m);
          }
        }
      }
    }
    if constexpr (!kGrouped)
      for (int t = 0; t < NT; ++t)
        for (int h = 0; h < 2; ++h) {
          acc[t][h] = vfmaq_f32(acc[t][h], vcvtq_f32_s32(isum[t][h]), dd[t][h]);
          acc_min[t][h] = vfmaq_f32(acc_min[t][h], vcvtq_f32_s32(imin[t][h]), ddmin[t][h]);
        }
  }
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < 2; ++h) vst1q_f32(out + size_t(t) * out_stride + 4 * h, vsubq_f32(acc[t][h], acc_min[t][h]));
}

// WeightKernels::Repacked::dot_tile (kGrouped: its dot_tile_grouped): whole groups of
// the rows8 layout (n_w a multiple of 8), every token count, tokens in tiles of 4
// sharing each pair's unpacked codes.
template <int kBits, bool kGrouped>
void dot_tile_rows8_k_repacked(const void* weights, size_t w_row_bytes, int n_w, const void* activations,
                               size_t a_row_bytes, int n_x, float* out, size_t out_stride, int64_t n) {
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(activations);
  const int64_t nb = n / quant::kQKK;
  for (int r = 0; r < n_w; r += 8) {
    const std::byte* rec0 = w + size_t(r) * w_row_bytes;
    int t = 0;
    for (; t + 4 <= n_x; t += 4)
      rows8_k_tile<kBits, kGrouped, 4>(rec0, a + size_t(t) * a_row_bytes, a_row_bytes,
                                       out + size_t(t) * out_stride + r, out_stride, nb);
    const std::byte* at = a + size_t(t) * a_row_bytes;
    float* ot = out + size_t(t) * out_stride + r;
    switch (n_x - t) {
      case 3: rows8_k_tile<kBits, kGrouped, 3>(rec0, at, a_row_bytes, ot, out_stride, nb); break;
      case 2: rows8_k_tile<kBits, kGrouped, 2>(rec0, at, a_row_bytes, ot, out_stride, nb); break;
      case 1: rows8_k_tile<kBits, kGrouped, 1>(rec0, at, a_row_bytes, ot, out_stride, nb); break;
      default: break;
    }
  }
}

// The Repacked entry of Q4_K (kBits 4, with the grouped order) or Q5_K at this level;
// none at i8mm, whose file-layout tiles use SMMLA (rows8.hpp's rows8_repacked).
template <int kBits>
constexpr WeightKernels::Repacked rows8_k_repacked() {
#if defined(__ARM_FEATURE_MATMUL_INT8)
  return {};
#else
  return {dot_tile_rows8_k_repacked<kBits, false>, 4,
          kBits == 4 ? dot_tile_rows8_k_repacked<kBits, true> : nullptr, 0};
#endif
}

}  // namespace
}  // namespace ember::cpu::EMBER_NEON_NS
