// AVX2 step kernels shared by the super-block formats (Q4_K, Q5_K, Q6_K) with Q8_K
// activations: one step is one 256-value super-block.
//
// Integer part: vpmaddubsw (unsigned weight codes x signed activation codes, pairs
// into int16, at most 2 * 63 * 127: no saturation), then vpmaddwd by the 16-bit
// sub-block scale widens to int32 and applies the scale in one instruction.
// Sub-block mins (and Q6_K's code offset 32) go through the activation's 16-value
// sums (bsums), so the codes never need to be signed.
#pragma once

#include "cpu/kernels/avx2/simd.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

// Activation super-block: codes are read from memory when used (from L1: they are
// reused by every weight row of the tile), scale and sums stay in registers.
struct ActQ8_K {
  const std::byte* qs;
  float d;
  __m256i bsums;  // 16 x int16

  static ActQ8_K load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ8_K);
    return {b + offsetof(quant::BlockQ8_K, qs), load_f32(b), load256(b + offsetof(quant::BlockQ8_K, bsums))};
  }
  __m256i codes(int chunk) const { return load256(qs + 32 * chunk); }
};

// Q4_K / Q5_K 6-bit scales and mins, one per byte (layout in lib/quant/blocks.hpp).
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

// Weights of one Q4_K / Q5_K super-block.
struct WtKOffset {
  __m256i q[8];  // codes of sub-block j
  __m256i sc;    // the 8 scales as int16, in both 128-bit lanes
  __m256i mn;    // mins, each twice: words 2j and 2j + 1 hold mn[j] (pairs with bsums)
  float d, dmin;
};

inline void load_k_offset_scales(const std::byte* block, WtKOffset& w) {
  w.d = half_at(block);
  w.dmin = half_at(block + 2);
  const KScales8 s = unpack_scales(block + 4);
  w.sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(s.sc))));
  const __m256i mn32 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(s.mn)));
  w.mn = _mm256_or_si256(mn32, _mm256_slli_epi32(mn32, 16));
}

inline void load_k_nibbles(const std::byte* qs, WtKOffset& w) {
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  for (int g = 0; g < 4; ++g) {
    const __m256i v = load256(qs + 32 * g);
    w.q[2 * g] = _mm256_and_si256(v, nibble);
    w.q[2 * g + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
  }
}

// Scale j broadcast to every word.
inline __m256i scale_of(__m256i sc, int j) { return _mm256_shuffle_epi8(sc, _mm256_set1_epi16(short(0x0100 + 0x0202 * j))); }

// acc += d_w * d_a * sum(sc * q * a) - dmin_w * d_a * sum(mn * bsums).
inline void madd_k_offset(__m256& acc, const WtKOffset& w, const ActQ8_K& a) {
  __m256i sum = _mm256_setzero_si256();
  for (int j = 0; j < 8; ++j)
    sum = madd16_add(sum, _mm256_maddubs_epi16(w.q[j], a.codes(j)), scale_of(w.sc, j));
  const __m256i mins = _mm256_madd_epi16(a.bsums, w.mn);
  acc = _mm256_fmadd_ps(_mm256_set1_ps(w.d * a.d), _mm256_cvtepi32_ps(sum), acc);
  acc = _mm256_fnmadd_ps(_mm256_set1_ps(w.dmin * a.d), _mm256_cvtepi32_ps(mins), acc);
}

// Stores scale * q - offset for the 32 codes of one sub-block.
inline void store_sub_block(float* dst, __m256i codes, float scale, float offset) {
  const __m256 s = _mm256_set1_ps(scale), o = _mm256_set1_ps(offset);
  const __m128i lo = _mm256_castsi256_si128(codes), hi = _mm256_extracti128_si256(codes, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int i = 0; i < 4; ++i) {
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i]));
    _mm256_storeu_ps(dst + 8 * i, _mm256_sub_ps(unfused(_mm256_mul_ps(s, v)), o));
  }
}

}  // namespace
}  // namespace ember::cpu::EMBER_AVX2_NS
