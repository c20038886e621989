// Helpers shared by the AVX-512 kernels (compiled with -mavx512f/bw/vl/dq/vnni).
// Internal linkage only: see cpu/kernels/tile.hpp.
#pragma once

// GCC 12 reports its own _mm512_undefined_* placeholders (inside the cast and
// reduce intrinsics) as uninitialized once they are inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/fp16.hpp"
#include "cpu/kernels/bytes.hpp"
#include "cpu/kernels/kernels.hpp"
#include "quant/blocks.hpp"

namespace ember::cpu::avx512 {

// Activation quantizers of this level (activations.cpp), bit-identical to lib/quant's.
void quantize_q8_0(const float* x, void* dst, int64_t n);
void quantize_q8_1(const float* x, void* dst, int64_t n);
void quantize_q8_k(const float* x, void* dst, int64_t n);

namespace {


// Keeps a product from being fused into a following add (the dequantizers promise
// the reference's two roundings).
inline __m512 unfused(__m512 v) {
  __asm__("" : "+v"(v));
  return v;
}

// The 32-value formats keep two blocks per 512-bit register in "split" order:
// 128-bit lanes [block 0 values 0-15, block 1 values 0-15, block 0 values 16-31,
// block 1 values 16-31], which is the order 4-bit codes unpack into (low nibbles,
// then high nibbles) without a byte shuffle. Activation codes are brought into the
// same order with one lane permutation per step.

// Two fp16 block scales as a vector in split order: lanes 0-3 and 8-11 = h0, 4-7 and 12-15 = h1.
inline __m512 fp16_pair(uint16_t h0, uint16_t h1) {
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(int(uint32_t(h0) | uint32_t(h1) << 16)));
  const __m512i index = _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(index, _mm512_castps128_ps512(f));
}

// 64 consecutive codes (32 at p, 32 at q) in split order.
inline __m512i load_split(const std::byte* p, const std::byte* q) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  return _mm512_shuffle_i64x2(both, both, _MM_SHUFFLE(3, 1, 2, 0));
}

// The 4-bit codes of two Q4_0-style blocks (16 bytes at p and at q) in split order.
inline __m512i nibbles_split(const std::byte* p, const std::byte* q) {
  const __m256i both = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(q), reinterpret_cast<const __m128i*>(p));
  const __m512i wide = _mm512_inserti64x4(_mm512_castsi256_si512(both), _mm256_srli_epi16(both, 4), 1);
  return _mm512_and_si512(wide, _mm512_set1_epi8(0x0f));
}

// Fifth-bit masks of two Q5 blocks (qh words h0, h1) in split order, one bit per byte.
inline __mmask64 high_bits_split(uint32_t h0, uint32_t h1) {
  return _cvtu64_mask64((uint64_t(h0) & 0xffff) | (uint64_t(h1) & 0xffff) << 16 | uint64_t(h0 >> 16) << 32 |
                        uint64_t(h1 >> 16) << 48);
}

// The 32 4-bit codes of one Q4_0-style block (16 bytes at p) in value order.
inline __m256i nibbles_32(const std::byte* p) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// Sum of each 4 consecutive signed bytes, as 16 int32 lanes.
inline __m512i sum4_i8(__m512i y) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), y); }

inline int32_t hsum_i32(__m512i v) { return _mm512_reduce_add_epi32(v); }
// s + the products of 16 lanes' codes q[k] (unsigned; lane = weight row) with the 8
// activation dwords at y (each broadcast to every lane), k = 0..7: one 32-value block of
// 16 rows in the one-lane-per-row kernels (rows16.hpp, q4_g.cpp).
inline __m512i dot_dwords8(__m512i s, const __m512i q[8], const std::byte* y) {
  for (int k = 0; k < 8; ++k) {
    int32_t dw;
    std::memcpy(&dw, y + 4 * k, 4);
    s = _mm512_dpbusd_epi32(s, q[k], _mm512_set1_epi32(dw));
  }
  return s;
}

// Byte offsets of 16 consecutive rows (gather indices for one dword of each row).
inline __m512i row_offsets16(size_t row_bytes) {
  return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                            _mm512_set1_epi32(int32_t(row_bytes)));
}
inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

inline __m256i load256(const std::byte* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i load128(const std::byte* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

}  // namespace
}  // namespace ember::cpu::avx512
