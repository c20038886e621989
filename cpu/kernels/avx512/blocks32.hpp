// AVX-512 step kernels shared by the 32-value formats: one step is two blocks
// (64 values), so a 512-bit register holds all codes of the step.
//
// Integer part: VNNI vpdpbusd multiplies unsigned weight codes by signed
// activation codes, 4 products per int32 lane. Formats with a code offset
// (Q4_0: q - 8, Q5_0: q - 16, Q8_0 stored signed and shifted by +128 here) start
// the accumulation from -offset * (sum of the 4 activation codes of the lane),
// precomputed once per activation step. Registers are in split order (simd.hpp),
// so the float part multiplies by a vector of the two blocks' scale products in
// the same order.
#pragma once

#include "cpu/kernels/avx512/simd.hpp"

namespace ember::cpu::avx512 {
namespace {

// Activation step of a Q8_0 row, for weights whose codes carry offset kOffset (a power of two).
template <int kOffset>
struct ActQ8_0 {
  __m512i y;     // 64 codes
  __m512i bias;  // -kOffset * sum of each 4 codes
  __m512 d;      // block scales, 8 lanes each

  static ActQ8_0 load(const std::byte* row, int64_t s) {
    constexpr int kShift = kOffset == 8 ? 3 : kOffset == 16 ? 4 : 7;
    static_assert(kOffset == 1 << kShift);
    const std::byte* b0 = row + size_t(s) * 2 * sizeof(quant::BlockQ8_0);
    const std::byte* b1 = b0 + sizeof(quant::BlockQ8_0);
    ActQ8_0 a;
    a.y = load_split(b0 + 2, b1 + 2);
    a.bias = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum4_i8(a.y), kShift));
    a.d = fp16_pair(load_u16(b0), load_u16(b1));
    return a;
  }
};

// Weights of one step: unsigned codes and block scales.
struct WtCodes {
  __m512i q;
  __m512 d;
};

// Step kernel for Q8_0 activations; W provides load(row, step) -> WtCodes, kOffset and
// the reference dot for tails (n an odd number of blocks).
template <class W>
struct StepQ8_0 {
  static constexpr int kStep = 64;
  using Act = ActQ8_0<W::kOffset>;
  using Wt = WtCodes;
  using Acc = __m512;
  static Acc zero() { return _mm512_setzero_ps(); }
  static Act load_act(const std::byte* a, int64_t s) { return Act::load(a, s); }
  static Wt load_w(const std::byte* w, int64_t s) { return W::load(w, s); }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    const __m512i sum = _mm512_dpbusd_epi32(a.bias, w.q, a.y);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(w.d, a.d), acc);
  }
  static float reduce(const Acc& acc) { return hsum(acc); }
  static float tail(const std::byte* w, const std::byte* a, int64_t first, int64_t n) {
    const int64_t block = first / quant::kQK;
    return W::ref_dot(w + block * W::kBlockBytes, a + block * sizeof(quant::BlockQ8_0), n - first);
  }
};

// Activation step of a Q8_1 row.
struct ActQ8_1 {
  __m512i y;  // 64 codes
  __m512 d;   // block scales
  __m512 s;   // block sums d * sum(q)

  static ActQ8_1 load(const std::byte* row, int64_t s) {
    const std::byte* b0 = row + size_t(s) * 2 * sizeof(quant::BlockQ8_1);
    const std::byte* b1 = b0 + sizeof(quant::BlockQ8_1);
    ActQ8_1 a;
    a.y = load_split(b0 + 4, b1 + 4);
    a.d = fp16_pair(load_u16(b0), load_u16(b1));
    a.s = fp16_pair(load_u16(b0 + 2), load_u16(b1 + 2));
    return a;
  }
};

// Weights with an offset: x = d * q + m. m8 holds m / 8 in each of the block's 8 lanes,
// so that the lanes of a block sum to m * s (exact: division by a power of two).
struct WtCodesMin {
  __m512i q;
  __m512 d;
  __m512 m8;
};

template <class W>
struct StepQ8_1 {
  static constexpr int kStep = 64;
  using Act = ActQ8_1;
  using Wt = WtCodesMin;
  using Acc = __m512;
  static Acc zero() { return _mm512_setzero_ps(); }
  static Act load_act(const std::byte* a, int64_t s) { return Act::load(a, s); }
  static Wt load_w(const std::byte* w, int64_t s) { return W::load(w, s); }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    const __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.q, a.y);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(w.d, a.d), acc);
    acc = _mm512_fmadd_ps(w.m8, a.s, acc);
  }
  static float reduce(const Acc& acc) { return hsum(acc); }
  static float tail(const std::byte* w, const std::byte* a, int64_t first, int64_t n) {
    const int64_t block = first / quant::kQK;
    return W::ref_dot(w + block * W::kBlockBytes, a + block * sizeof(quant::BlockQ8_1), n - first);
  }
};

// 16 codes (bytes) widened to f32.
inline __m512 u8_to_f32(__m128i codes) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(codes)); }
inline __m512 i8_to_f32(__m128i codes) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(codes)); }

// Stores d * (q - offset) for the 32 unsigned codes of one block (symmetric formats).
inline void store_symmetric(float* dst, __m256i codes, float offset, float d) {
  const __m512 o = _mm512_set1_ps(offset), s = _mm512_set1_ps(d);
  _mm512_storeu_ps(dst, _mm512_mul_ps(_mm512_sub_ps(u8_to_f32(_mm256_castsi256_si128(codes)), o), s));
  _mm512_storeu_ps(dst + 16, _mm512_mul_ps(_mm512_sub_ps(u8_to_f32(_mm256_extracti128_si256(codes, 1)), o), s));
}
// Stores q * d + m (product rounded first, as the reference).
inline void store_offset(float* dst, __m256i codes, float d, float m) {
  const __m512 s = _mm512_set1_ps(d), mv = _mm512_set1_ps(m);
  _mm512_storeu_ps(dst, _mm512_add_ps(unfused(_mm512_mul_ps(u8_to_f32(_mm256_castsi256_si128(codes)), s)), mv));
  _mm512_storeu_ps(dst + 16,
                   _mm512_add_ps(unfused(_mm512_mul_ps(u8_to_f32(_mm256_extracti128_si256(codes, 1)), s)), mv));
}

// Adds bit 4 to the codes whose bit in `bits` (bit i for value i) is set.
inline __m256i add_high_bits(__m256i codes, uint32_t bits) {
  return _mm256_mask_add_epi8(codes, __mmask32(bits), codes, _mm256_set1_epi8(0x10));
}


}  // namespace
}  // namespace ember::cpu::avx512
