// ARM64 step kernels shared by the super-block formats (Q4_K, Q5_K, Q6_K) with Q8_K
// activations: one step is one 256-value super-block.
//
// Integer part: codes are unpacked to int8 (Q6_K: q - 32, signed), dot4 multiplies
// them with the activation codes, and the int32 results are scaled by the sub-block
// scales with integer multiply-adds. Q4_K / Q5_K sub-block mins go through the
// activation's 16-value sums (bsums), as in the reference.
#pragma once

#include "cpu/kernels/neon/simd.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

// Activation super-block: codes are read from memory when used (from L1: they are
// reused by every weight row of the tile); scale and sums stay in registers.
struct ActQ8_K {
  const std::byte* qs;
  float d;
  int16x8_t bsum_pairs;  // bsums[2j] + bsums[2j + 1], j = 0..7 (|sum| <= 2 * 16 * 127)

  static ActQ8_K load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ8_K);
    const int16_t* bsums = reinterpret_cast<const int16_t*>(b + offsetof(quant::BlockQ8_K, bsums));
    return {b + offsetof(quant::BlockQ8_K, qs), load_f32(b), vpaddq_s16(vld1q_s16(bsums), vld1q_s16(bsums + 8))};
  }
  // Codes 16i .. 16i + 15.
  int8x16_t codes(int i) const { return load_s8(qs + 16 * i); }
};

// Weights of one Q4_K / Q5_K super-block: codes 0..31 as int8, the unpacked 6-bit
// scales and mins (layout in lib/quant/blocks.hpp).
struct WtKOffset {
  int8x16_t q[16];  // sub-block j: q[2j] (values 0-15), q[2j + 1] (16-31)
  int32_t sc[8];
  int16x8_t mn;
  float d, dmin;
};

inline void load_k_offset_scales(const std::byte* block, WtKOffset& w) {
  w.d = half_at(block);
  w.dmin = half_at(block + 2);
  const quant::KScales s = quant::unpack_k_scales(reinterpret_cast<const uint8_t*>(block + 4));
  for (int j = 0; j < 8; ++j) w.sc[j] = s.sc[j];
  w.mn = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(s.mn)));
}

// Low 4 bits of the codes: 32-byte group g holds sub-block 2g in its low nibbles and
// 2g + 1 in its high ones.
inline void load_k_nibbles(const std::byte* qs, WtKOffset& w) {
  for (int g = 0; g < 4; ++g)
    for (int h = 0; h < 2; ++h) {
      const uint8x16_t v = load_u8(qs + 32 * g + 16 * h);
      w.q[4 * g + h] = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0f)));
      w.q[4 * g + 2 + h] = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
    }
}

// sum_j sc[j] * (codes of sub-block j . activation codes), as four int32 lanes.
inline int32x4_t scaled_sums(const WtKOffset& w, const ActQ8_K& a, int j_begin, int j_end) {
  int32x4_t sum = vdupq_n_s32(0);
  for (int j = j_begin; j < j_end; ++j) {
    const int32x4_t part = dot4(dot4(vdupq_n_s32(0), w.q[2 * j], a.codes(2 * j)), w.q[2 * j + 1], a.codes(2 * j + 1));
    sum = vmlaq_n_s32(sum, part, w.sc[j]);
  }
  return sum;
}
// mn[j] * (bsums[2j] + bsums[2j + 1]) for j = 0..7: lanes 0-3 and 4-7.
inline void min_terms(const WtKOffset& w, const ActQ8_K& a, int32x4_t& lo, int32x4_t& hi) {
  lo = vmull_s16(vget_low_s16(w.mn), vget_low_s16(a.bsum_pairs));
  hi = vmull_high_s16(w.mn, a.bsum_pairs);
}

}  // namespace
}  // namespace ember::cpu::EMBER_NEON_NS
