// Helpers shared by the AVX2 kernels (compiled with -mavx2 -mfma -mf16c -mbmi2).
// Internal linkage only: see cpu/kernels/tile.hpp.
//
// The same sources are compiled twice (cpu/CMakeLists.txt): as the avx2 level and,
// with -mavxvnni and EMBER_AVX2_VNNI defined, as the avx2vnni level (Intel client
// CPUs since Alder Lake, AMD Zen 5), whose integer dot products use vpdpbusd /
// vpdpwssd where the plain level needs vpmaddubsw + vpmaddwd (+ vpaddd). Integer sums
// are exact either way, so both levels compute the same bits.
#pragma once

#if defined(EMBER_AVX2_VNNI)
#define EMBER_AVX2_NS avx2vnni
#else
#define EMBER_AVX2_NS avx2
#endif

#include <immintrin.h>

#if defined(EMBER_AVX2_VNNI) && defined(EMBER_EMULATE_AVX_VNNI)
// Test builds (EMBER_EMULATE_AVX_VNNI): the avx2vnni level compiled without -mavxvnni, its
// two AVX-VNNI instructions computed with AVX2, so that every line of the level but those
// two runs on machines without AVX-VNNI. Same results: both instructions add exact integer
// sums without saturation.
namespace ember::cpu::avx2vnni::emulated {
// vpdpbusd: acc + sum over each 4 bytes of u8(u) * s8(s), per int32 lane.
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) {
  const __m256i low = _mm256_set1_epi16(0x00ff);
  const __m256i u_even = _mm256_and_si256(u, low), u_odd = _mm256_srli_epi16(u, 8);
  const __m256i s_even = _mm256_srai_epi16(_mm256_slli_epi16(s, 8), 8), s_odd = _mm256_srai_epi16(s, 8);
  return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(u_even, s_even), _mm256_madd_epi16(u_odd, s_odd)));
}
// vpdpwssd: acc + a[2i] b[2i] + a[2i + 1] b[2i + 1], per int32 lane.
inline __m256i dpwssd(__m256i acc, __m256i a, __m256i b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
}  // namespace ember::cpu::avx2vnni::emulated
#define _mm256_dpbusd_avx_epi32 ::ember::cpu::avx2vnni::emulated::dpbusd
#define _mm256_dpwssd_avx_epi32 ::ember::cpu::avx2vnni::emulated::dpwssd
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/fp16.hpp"
#include "cpu/kernels/bytes.hpp"
#include "cpu/kernels/kernels.hpp"
#include "quant/blocks.hpp"

namespace ember::cpu::EMBER_AVX2_NS {

// Activation quantizers of this level (activations.cpp), bit-identical to lib/quant's.
void quantize_q8_0(const float* x, void* dst, int64_t n);
void quantize_q8_1(const float* x, void* dst, int64_t n);
void quantize_q8_k(const float* x, void* dst, int64_t n);

namespace {

// fp16 -> f32 with the F16C instruction (exact, as ember::fp16_to_fp32).
inline float half(uint16_t h) { return _cvtsh_ss(h); }
inline float half_at(const std::byte* p) { return half(load_u16(p)); }

// Keeps a product from being fused into a following add (the dequantizers promise
// the reference's two roundings).
inline __m256 unfused(__m256 v) {
  __asm__("" : "+x"(v));
  return v;
}

inline __m256i load256(const std::byte* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i load128(const std::byte* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}
inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}
inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// The 32 4-bit codes of a Q4_0-style block (16 bytes at p) in value order, one per byte.
inline __m256i nibbles_32(const std::byte* p) {
  const __m128i q = load128(p);
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// 0x10 in byte i where bit i of `bits` is set.
inline __m256i high_bits_32(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i select = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Sum of adjacent pairs of int16, as int32.
inline __m256i sum_pairs(__m256i v) { return _mm256_madd_epi16(v, _mm256_set1_epi16(1)); }

// True on the avx2vnni level.
constexpr bool kVnni =
#if defined(EMBER_AVX2_VNNI)
    true;
#else
    false;
#endif

// acc + the sums of each 4 products u[i] * s[i] (u unsigned, s signed bytes) per int32
// lane. Without VNNI through int16 pairs: exact while each pair sum u0 s0 + u1 s1 fits
// in int16 (callers: u < 128 and s in [-128, 127], or the sign trick of Q8_0).
inline __m256i dot4_add(__m256i acc, __m256i u, __m256i s) {
#if defined(EMBER_AVX2_VNNI)
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, sum_pairs(_mm256_maddubs_epi16(u, s)));
#endif
}

// acc + a[2i] b[2i] + a[2i + 1] b[2i + 1] per int32 lane (int16 a, b).
inline __m256i madd16_add(__m256i acc, __m256i a, __m256i b) {
#if defined(EMBER_AVX2_VNNI)
  return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// Packs 32 int32 (four vectors, each in [-128, 127]) into 32 int8 in order.
inline __m256i pack_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  const __m256i packed = _mm256_packs_epi16(ab, cd);
  // The in-lane packs leave the groups of 4 values in the order a0 b0 c0 d0 a1 b1 c1 d1.
  return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

}  // namespace
}  // namespace ember::cpu::EMBER_AVX2_NS
