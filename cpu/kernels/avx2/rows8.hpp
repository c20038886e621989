// AVX2 batches with one int32 lane per weight row: 8 rows per register.
//
// The plain AVX2 step kernels (blocks32.hpp, blocks256.hpp) give every (weight row,
// token) pair a register of eight partial sums, which must be reduced horizontally
// and scaled once per block or super-block: about as many instructions as the dot
// product itself. Here the codes of 8 weight rows are transposed (8 x 8 dwords) so
// that register k holds codes 4k .. 4k + 3 of every row, one row per int32 lane; an
// activation dword broadcast to all lanes then gives each lane its own row's partial
// dot product, and the float work (scales, FMAs) is one instruction per 8 rows. The
// transposition is done once per block and reused by every token of the call.
//
// Integer sums are exact in any order, so a kernel built on this keeps whatever
// float order its format promises (quant/lanes.hpp) while vectorizing it over rows.
#pragma once

#include "cpu/kernels/avx2/simd.hpp"
#include "cpu/kernels/transpose8x8.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

constexpr int kRows8 = 8;
// Tokens per pass over a block of 8 rows (accumulators live on the stack).
constexpr int kRows8Tokens = 32;


// Loads the 32 bytes at p + r * stride for r = 0..7 and transposes them (see above).
inline void load_transposed8(const std::byte* p, size_t stride, __m256i out[8]) {
  __m256i rows[8];
  for (int r = 0; r < 8; ++r) rows[r] = load256(p + size_t(r) * stride);
  transpose_8x8(rows, out);
}

// 16 bytes at p + r * stride (r = 0..7), transposed: out[k] lane r = dword k (k < 4).
inline void load_transposed8_half(const std::byte* p, size_t stride, __m256i out[4]) {
  __m256i rows[4];
  for (int r = 0; r < 4; ++r)
    rows[r] = _mm256_inserti128_si256(_mm256_castsi128_si256(load128(p + size_t(r) * stride)),
                                      load128(p + size_t(r + 4) * stride), 1);
  // rows[r]: row r in the low 128 bits, row r + 4 in the high ones: a 4 x 4 transpose per half.
  const __m256i t0 = _mm256_unpacklo_epi32(rows[0], rows[1]), t1 = _mm256_unpackhi_epi32(rows[0], rows[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(rows[2], rows[3]), t3 = _mm256_unpackhi_epi32(rows[2], rows[3]);
  out[0] = _mm256_unpacklo_epi64(t0, t2);
  out[1] = _mm256_unpackhi_epi64(t0, t2);
  out[2] = _mm256_unpacklo_epi64(t1, t3);
  out[3] = _mm256_unpackhi_epi64(t1, t3);
}

// The fp16 at p + r * stride for r = 0..7, as 8 floats.
inline __m256 load_fp16_rows8(const std::byte* p, size_t stride) {
  alignas(16) uint16_t h[8];
  for (int r = 0; r < 8; ++r) h[r] = load_u16(p + size_t(r) * stride);
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
}

// The activation dword at p, in every lane.
inline __m256i bcast32(const std::byte* p) { return _mm256_set1_epi32(int32_t(load_u32(p))); }

// Sum over k < K of maddubs(q[k], a dword k), in int16 (callers keep it below 2^15).
template <int K>
inline __m256i maddubs_sum(const __m256i* q, const std::byte* a) {
  __m256i s = _mm256_maddubs_epi16(q[0], bcast32(a));
  for (int k = 1; k < K; ++k) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(q[k], bcast32(a + 4 * k)));
  return s;
}

// Sum over k < K of the dword-k dot products (q[k] by the activation's dword k) as
// int32, added to acc: vpdpbusd on the avx2vnni level, else the int16 sum above.
template <int K>
inline __m256i dot_rows8(__m256i acc, const __m256i* q, const std::byte* a) {
  if constexpr (kVnni) {
    // Two chains: vpdpbusd's latency would otherwise bound a chain of K.
    __m256i odd = _mm256_setzero_si256();
    for (int k = 0; k + 1 < K; k += 2) {
      acc = dot4_add(acc, q[k], bcast32(a + 4 * k));
      odd = dot4_add(odd, q[k + 1], bcast32(a + 4 * k + 4));
    }
    if constexpr (K % 2) acc = dot4_add(acc, q[K - 1], bcast32(a + 4 * (K - 1)));
    return _mm256_add_epi32(acc, odd);
  } else {
    return _mm256_add_epi32(acc, sum_pairs(maddubs_sum<K>(q, a)));
  }
}

// Stores 8 row results (lane r) of token t: out[t * out_stride + r].
inline void store_rows8(float* out, __m256 v) { _mm256_storeu_ps(out, v); }

// llama.cpp's eight float lanes of 8 rows (lanes[m], lane r: row r) added as
// quant::Lanes8::sum adds them: (v4 + v0), (v5 + v1), (v6 + v2), (v7 + v3), then
// (s0 + s2) + (s1 + s3).
inline __m256 lanes8_sum_rows8(const float (&lanes)[8][8]) {
  __m256 v[8];
  for (int m = 0; m < 8; ++m) v[m] = _mm256_load_ps(lanes[m]);
  const __m256 s0 = _mm256_add_ps(v[4], v[0]), s1 = _mm256_add_ps(v[5], v[1]);
  const __m256 s2 = _mm256_add_ps(v[6], v[2]), s3 = _mm256_add_ps(v[7], v[3]);
  return _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3));
}

using DotTileFn = void (*)(const void*, size_t, int, const void*, size_t, int, float*, size_t, int64_t);

// The body of the rows8 dot_tiles: `group(weights of rows r .. r + 7, out + r)` over the
// whole groups of 8 rows, `Other` (a plain dot_tile) for the rows after them.
template <DotTileFn Other, class Group>
void over_row_groups(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                     int n_x, float* out, size_t out_stride, int64_t n, Group&& group) {
  const auto* w = static_cast<const std::byte*>(weights);
  int r = 0;
  for (; r + kRows8 <= n_w; r += kRows8) group(w + size_t(r) * w_row_bytes, out + r);
  if (r < n_w)
    Other(w + size_t(r) * w_row_bytes, w_row_bytes, n_w - r, activations, a_row_bytes, n_x, out + r, out_stride, n);
}

}  // namespace
}  // namespace ember::cpu::EMBER_AVX2_NS
