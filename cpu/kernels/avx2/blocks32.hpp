// AVX2 step kernels shared by the 32-value formats: one step is one block.
//
// Integer part: vpmaddubsw multiplies unsigned weight codes by signed activation
// codes and adds pairs into int16 (at most 2 * 31 * 127 for 5-bit codes, no
// saturation), vpmaddwd with ones widens to int32. Formats with a code offset
// (Q4_0: q - 8, Q5_0: q - 16) add -offset * (sum of the activation codes of each
// int32 lane), precomputed once per activation step. Q8_0 weights are signed and use
// the sign trick: |w| * (a with the sign of w); on the avx2vnni level, whose vpdpbusd
// has no int16 step to overflow, they are shifted to w + 128 instead (offset 128).
#pragma once

#include "cpu/kernels/avx2/simd.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

// Activation step of a Q8_0 row; kOffset = 0 skips the code-offset term.
template <int kOffset>
struct ActQ8_0 {
  __m256i y;     // 32 codes
  __m256i bias;  // -kOffset * sum of each 4 codes
  float d;

  static ActQ8_0 load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ8_0);
    ActQ8_0 a;
    a.y = load256(b + 2);
    a.d = half_at(b);
    if constexpr (kOffset != 0) {
      const __m256i sum4 = sum_pairs(_mm256_maddubs_epi16(_mm256_set1_epi8(1), a.y));
      a.bias = _mm256_mullo_epi32(sum4, _mm256_set1_epi32(-kOffset));
    } else {
      a.bias = _mm256_setzero_si256();
    }
    return a;
  }
};

struct WtCodes {
  __m256i q;  // unsigned codes (for Q8_0: |w|)
  __m256i s;  // Q8_0 only: the signed codes
  float d;
};

// Step kernel for Q8_0 activations; W provides load(row, step), kOffset (0: signed
// Q8_0 codes), kBlockBytes and the reference dot for tails.
template <class W>
struct StepQ8_0 {
  static constexpr int kStep = quant::kQK;
  using Act = ActQ8_0<W::kOffset>;
  using Wt = WtCodes;
  using Acc = __m256;
  static Acc zero() { return _mm256_setzero_ps(); }
  static Act load_act(const std::byte* a, int64_t s) { return Act::load(a, s); }
  static Wt load_w(const std::byte* w, int64_t s) { return W::load(w, s); }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    __m256i sum;
    if constexpr (W::kOffset != 0) {
      sum = dot4_add(a.bias, w.q, a.y);
    } else {
      sum = sum_pairs(_mm256_maddubs_epi16(w.q, _mm256_sign_epi8(a.y, w.s)));
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(w.d * a.d), acc);
  }
  static float reduce(const Acc& acc) { return hsum(acc); }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

// Activation step of a Q8_1 row.
struct ActQ8_1 {
  __m256i y;
  float d, s;
  static ActQ8_1 load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ8_1);
    return {load256(b + 4), half_at(b), half_at(b + 2)};
  }
};

struct WtCodesMin {
  __m256i q;
  float d, m;
};

// Accumulator of the offset formats: the vector part and the sum of m_w * s_a.
struct AccMin {
  __m256 v;
  float m;
};

template <class W>
struct StepQ8_1 {
  static constexpr int kStep = quant::kQK;
  using Act = ActQ8_1;
  using Wt = WtCodesMin;
  using Acc = AccMin;
  static Acc zero() { return {_mm256_setzero_ps(), 0.0f}; }
  static Act load_act(const std::byte* a, int64_t s) { return Act::load(a, s); }
  static Wt load_w(const std::byte* w, int64_t s) { return W::load(w, s); }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    const __m256i sum = dot4_add(_mm256_setzero_si256(), w.q, a.y);
    acc.v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(w.d * a.d), acc.v);
    acc.m += w.m * a.s;
  }
  static float reduce(const Acc& acc) { return hsum(acc.v) + acc.m; }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

// Stores d * (q - offset) for the 32 unsigned codes of a block (symmetric formats).
inline void store_symmetric(float* dst, __m256i codes, float offset, float d) {
  const __m256 o = _mm256_set1_ps(offset), s = _mm256_set1_ps(d);
  const __m128i lo = _mm256_castsi256_si128(codes), hi = _mm256_extracti128_si256(codes, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int i = 0; i < 4; ++i) {
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i]));
    _mm256_storeu_ps(dst + 8 * i, _mm256_mul_ps(_mm256_sub_ps(v, o), s));
  }
}
// Stores q * d + m (product rounded first, as the reference).
inline void store_offset(float* dst, __m256i codes, float d, float m) {
  const __m256 s = _mm256_set1_ps(d), mv = _mm256_set1_ps(m);
  const __m128i lo = _mm256_castsi256_si128(codes), hi = _mm256_extracti128_si256(codes, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int i = 0; i < 4; ++i) {
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i]));
    _mm256_storeu_ps(dst + 8 * i, _mm256_add_ps(unfused(_mm256_mul_ps(v, s)), mv));
  }
}

}  // namespace
}  // namespace ember::cpu::EMBER_AVX2_NS
