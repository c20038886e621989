// AVX-512 step kernels shared by the super-block formats (Q4_K, Q5_K, Q6_K) with
// Q8_K activations: one step is one 256-value super-block.
//
// Integer part: vpmaddubsw multiplies unsigned weight codes by signed activation
// codes and adds pairs into int16 (at most 2 * 63 * 127, no saturation); VNNI
// vpdpwssd then multiplies those by the 16-bit sub-block scales and accumulates
// int32. Sub-block mins (and Q6_K's code offset 32) go through the activation's
// 16-value sums (bsums), so the codes never need to be signed.
#pragma once

#include "cpu/kernels/avx512/simd.hpp"

namespace ember::cpu::avx512 {
namespace {

// Activation super-block of a Q4_K / Q5_K step. The weights' codes come in 64-byte
// registers holding the low nibbles (or the high nibbles) of two consecutive 32-byte
// groups, i.e. sub-blocks (4c, 4c + 2) or (4c + 1, 4c + 3); the activation codes are
// rearranged once here to the same order, so each weight register is used as loaded.
// The 256 activation codes of a super-block as 4 registers holding sub-blocks (0, 2),
// (1, 3), (4, 6), (5, 7): the order Q4_K / Q5_K weight codes unpack into.
inline void load_k_codes(const std::byte* qs, __m512i* y) {
  for (int h = 0; h < 2; ++h) {
    const __m512i first = _mm512_loadu_si512(qs + 128 * h), second = _mm512_loadu_si512(qs + 128 * h + 64);
    y[2 * h] = _mm512_shuffle_i64x2(first, second, 0x44);      // 128-bit lanes 0 1 of each
    y[2 * h + 1] = _mm512_shuffle_i64x2(first, second, 0xee);  // lanes 2 3 of each
  }
}

struct ActQ8_KOffset {
  __m512i y[4];  // sub-blocks (0, 2), (1, 3), (4, 6), (5, 7)
  __m512 mins;   // lanes 0-7: d_a * (bsums[2j] + bsums[2j + 1]), lanes 8-15: 0
  float d;

  static ActQ8_KOffset load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ8_K);
    const std::byte* qs = b + offsetof(quant::BlockQ8_K, qs);
    ActQ8_KOffset a;
    a.d = load_f32(b);
    load_k_codes(qs, a.y);
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + offsetof(quant::BlockQ8_K, bsums)));
    const __m256 pairs = _mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, _mm256_set1_epi16(1)));
    a.mins = _mm512_zextps256_ps512(_mm256_mul_ps(pairs, _mm256_set1_ps(a.d)));
    return a;
  }
};

// Q4_K / Q5_K 6-bit scales and mins, unpacked with 32-bit word operations
// (the layout is drawn in lib/quant/blocks.hpp): 8 scales and 8 mins, one per byte.
struct KScales8 {
  uint64_t sc, mn;
};
inline KScales8 unpack_scales(const std::byte* scales) {
  uint32_t w[3];
  std::memcpy(w, scales, 12);
  const uint32_t sc_lo = w[0] & 0x3f3f3f3fu, mn_lo = w[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u);
  const uint32_t mn_hi = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u);
  return {uint64_t(sc_lo) | uint64_t(sc_hi) << 32, uint64_t(mn_lo) | uint64_t(mn_hi) << 32};
}

// Weights of one Q4_K / Q5_K super-block, ready for any number of activation rows.
struct WtKOffset {
  __m512i q[4];   // codes of sub-blocks (0, 2), (1, 3), (4, 6), (5, 7)
  __m512i sc[4];  // their 16-bit scales: words 0-15 the first sub-block's, 16-31 the second's
  __m512 mins;    // lanes 0-7: dmin * mn[j], lanes 8-15: 0
  float d;
};

// Sub-block of each half of register k (see WtKOffset::q).
constexpr int kSubBlock[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};

// The 16-bit scales of registers k = 0..3 (see WtKOffset::sc).
inline void k_scale_words(const KScales8& s, __m512i* sc) {
  // The 8 scales as words, in every 128-bit lane; a byte shuffle per register
  // broadcasts the right one over each 256-bit half.
  const __m512i sc16 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(s.sc))));
  for (int k = 0; k < 4; ++k) {
    const short lo = short(0x0100 + 0x0202 * kSubBlock[k][0]), hi = short(0x0100 + 0x0202 * kSubBlock[k][1]);
    const __m512i index = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(lo)), _mm256_set1_epi16(hi), 1);
    sc[k] = _mm512_shuffle_epi8(sc16, index);
  }
}

inline void load_k_offset_scales(const std::byte* block, WtKOffset& w) {
  w.d = _cvtsh_ss(load_u16(block));
  const float dmin = _cvtsh_ss(load_u16(block + 2));
  const KScales8 s = unpack_scales(block + 4);
  k_scale_words(s, w.sc);
  const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(s.mn))));
  w.mins = _mm512_zextps256_ps512(_mm256_mul_ps(mn, _mm256_set1_ps(dmin)));
}

// Low and high nibbles of 64 bytes of Q4_K / Q5_K codes.
inline void load_nibbles(const std::byte* p, __m512i& low, __m512i& high) {
  const __m512i v = _mm512_loadu_si512(p);
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  low = _mm512_and_si512(v, nibble);
  high = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
}

// acc += d_w * d_a * sum(sc * q * a) - sum_j (dmin_w * mn[j]) * (d_a * bsums of sub-block j).
inline void madd_k_offset(__m512& acc, const WtKOffset& w, const ActQ8_KOffset& a) {
  __m512i sum = _mm512_setzero_si512();
  for (int k = 0; k < 4; ++k) sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(w.q[k], a.y[k]), w.sc[k]);
  acc = _mm512_fmadd_ps(_mm512_set1_ps(w.d * a.d), _mm512_cvtepi32_ps(sum), acc);
  acc = _mm512_fnmadd_ps(w.mins, a.mins, acc);
}

// Activation super-block of a Q6_K step: codes in value order.
struct ActQ8_K {
  const std::byte* qs;  // 256 codes, read when used (from L1)
  __m512 bsums;         // d_a * bsums[j]
  float d;

  static ActQ8_K load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ8_K);
    ActQ8_K a;
    a.qs = b + offsetof(quant::BlockQ8_K, qs);
    a.d = load_f32(b);
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + offsetof(quant::BlockQ8_K, bsums)));
    a.bsums = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(bsums)), _mm512_set1_ps(a.d));
    return a;
  }
  __m512i codes(int chunk) const { return _mm512_loadu_si512(qs + 64 * chunk); }
};

// Stores scale * q - offset for the 32 codes of one sub-block (bytes of `codes`).
inline void store_sub_block(float* dst, __m256i codes, float scale, float offset) {
  const __m512 s = _mm512_set1_ps(scale), o = _mm512_set1_ps(offset);
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(codes)));
  const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(codes, 1)));
  _mm512_storeu_ps(dst, _mm512_sub_ps(unfused(_mm512_mul_ps(s, lo)), o));
  _mm512_storeu_ps(dst + 16, _mm512_sub_ps(unfused(_mm512_mul_ps(s, hi)), o));
}

}  // namespace
}  // namespace ember::cpu::avx512
