// AVX-512 batches of the 32-value formats with Q8_0 activations, 16 weight rows per
// register (Q4_0's prefill; Q4_0, Q5_0 and Q8_0 in SumOrder::batch_invariant): one int32 lane per row, so that each block's float work (one FMA) serves
// 16 rows. The codes of 16 rows are gathered a dword of each row per register (C::load
// gives 8 registers of unsigned codes per block: q[k] holds values 4k .. 4k + 3 of
// every row), once per block, and reused by every token of the call (up to 32 at a
// time). Per output: the block's whole integer dot product first (exact), then
// acc = fma(float(isum), d_w * d_x, acc), blocks in order, so a row's result does not
// depend on the tokens beside it (backend::SumOrder::batch_invariant).
#pragma once

#include <cstring>
#include <vector>

#include "cpu/kernels/avx512/simd.hpp"
#include "cpu/kernels/kernels.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::avx512 {
namespace {

// The activation rows the kernels take (WeightKernels::invariant_packed): each Q8_0
// row as it is, then per block -kOffset * (sum of its codes) as int32 and its scale as
// float, computed once per op by pack_rows16 instead of once per call.
inline size_t rows16_sums_at(int64_t n) { return (size_t(n / quant::kQK) * sizeof(quant::BlockQ8_0) + 3) / 4 * 4; }
inline size_t rows16_row_bytes(int64_t n) { return rows16_sums_at(n) + size_t(n / quant::kQK) * 8; }

template <int kOffset>
void pack_rows16(const void* activations, void* packed, int64_t n) {
  const int64_t nb = n / quant::kQK;
  const auto* a = static_cast<const std::byte*>(activations);
  auto* p = static_cast<std::byte*>(packed);
  std::memcpy(p, a, size_t(nb) * sizeof(quant::BlockQ8_0));
  auto* offset = reinterpret_cast<int32_t*>(p + rows16_sums_at(n));
  auto* d = reinterpret_cast<float*>(offset + nb);
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* ab = a + size_t(b) * sizeof(quant::BlockQ8_0);
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab + 2));
    const __m256i sum4 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), y);
    offset[b] = -kOffset * hsum_i32(_mm512_zextsi256_si512(sum4));
    d[b] = _cvtsh_ss(load_u16(ab));
  }
}

// C: kBlockBytes, kOffset (codes are value + kOffset, unsigned), and
//    static void load(const std::byte* block, __m512i rows, __m512i q[8], __m512& d).
// `a`: rows as pack_rows16<C::kOffset> wrote them.
template <class C>
void rows16(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, int n_x, float* out,
            size_t out_stride, int64_t n) {
  constexpr int kTokens = 32;
  constexpr size_t kActBlock = sizeof(quant::BlockQ8_0);
  const __m512i rows = row_offsets16(w_row_bytes);
  const int64_t nb = n / quant::kQK;
  const size_t sums_at = rows16_sums_at(n);
  for (int t0 = 0; t0 < n_x; t0 += kTokens) {
    const int nt = n_x - t0 < kTokens ? n_x - t0 : kTokens;
    __m512 acc[kTokens];
    for (int t = 0; t < nt; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m512i q[8];
      __m512 d;
      C::load(w + size_t(b) * C::kBlockBytes, rows, q, d);
      for (int t = 0; t < nt; ++t) {
        const std::byte* row = a + size_t(t0 + t) * a_row_bytes;
        const std::byte* y = row + size_t(b) * kActBlock + 2;
        const auto* offset = reinterpret_cast<const int32_t*>(row + sums_at);
        const auto* d_act = reinterpret_cast<const float*>(offset + nb);
        const __m512i s = dot_dwords8(_mm512_set1_epi32(offset[b]), q, y);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(d_act[b])), acc[t]);
      }
    }
    for (int t = 0; t < nt; ++t) _mm512_storeu_ps(out + size_t(t0 + t) * out_stride, acc[t]);
  }
}

// The scales of 16 rows' blocks (f16 at the start of each block).
inline __m512 gather_scales16(const std::byte* block, __m512i rows) {
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(rows, block, 1)));
}

// ---- one token: rows16's sums with contiguous loads ----
//
// For one token rows16's gathers (each touches 16 rows' lines for 4 bytes of each) cost
// more than the memory-bound decode can hide. rows16_one computes the same bits: each
// register holds two consecutive blocks of ONE row (S::pair, contiguous loads), one
// vpdpbusd against the token's two blocks leaves 8 partial sums per block, and a
// transposing tree of adds turns 16 such registers (16 rows) into each block's whole
// integer sums with lane = row. The integer sums are exact, so they equal rows16's;
// the float work per block (one FMA for the 16 rows) is rows16's, in the same order.
//
// S: kBlockBytes, kSplit, and
//    static __m512i pair(const std::byte* block): unsigned codes of the block at `block`
//      and of the next one, in value order ([block values 0-31, next block 0-31]) or, with
//      kSplit, in split order (simd.hpp: 128-bit lanes [b 0-15, next 0-15, b 16-31, next 16-31]);
//    static __m256i one(const std::byte* block): the codes of one block in value order.

// 32 codes (one block, value order) placed where pair() puts the first block; the
// second block's places are zero.
template <bool kSplit>
inline __m512i place_one(__m256i v) {
  if constexpr (kSplit)
    return _mm512_maskz_permutexvar_epi64(0x33, _mm512_setr_epi64(0, 1, 0, 0, 2, 3, 0, 0), _mm512_zextsi256_si512(v));
  return _mm512_zextsi256_si512(v);
}

// The integer sums of 16 rows x 2 blocks: v[r] = row r's 16 partial sums (pair layout).
// s0, s1: lane r = row r's sum over the first and the second block's lanes.
template <bool kSplit>
inline void reduce_rows16(const __m512i v[16], __m512i& s0, __m512i& s1) {
  __m512i a8[8], a4[4], a2[2];
  // Per 128-bit lane: {x0 + x2, y0 + y2, x1 + x3, y1 + y3}.
  for (int i = 0; i < 8; ++i)
    a8[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  // Per 128-bit lane L: rows 4i .. 4i + 3, each the sum of its 4 values in lane L.
  for (int i = 0; i < 4; ++i)
    a4[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(a8[2 * i], a8[2 * i + 1]),
                             _mm512_unpackhi_epi64(a8[2 * i], a8[2 * i + 1]));
  // The lanes of one block: 0 + 1 and 2 + 3 (value order) or 0 + 2 and 1 + 3 (split).
  // Result: {rows 8i .. 8i + 3: block 0, the same rows: block 1, rows 8i + 4 ..: block 0, block 1}.
  constexpr int kFirst = kSplit ? 0x44 : 0x88, kSecond = kSplit ? 0xEE : 0xDD;
  for (int i = 0; i < 2; ++i)
    a2[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(a4[2 * i], a4[2 * i + 1], kFirst),
                             _mm512_shuffle_i32x4(a4[2 * i], a4[2 * i + 1], kSecond));
  s0 = _mm512_shuffle_i32x4(a2[0], a2[1], 0x88);
  s1 = _mm512_shuffle_i32x4(a2[0], a2[1], 0xDD);
}

// out[0 .. 16) for one token `a` (pack_rows16's layout) and 16 rows at w. Prefetches,
// spread evenly over the loads, the 16 rows that follow (decode streams the matrix).
template <class S>
void rows16_one(const std::byte* w, size_t w_row_bytes, const std::byte* a, float* out, int64_t n) {
  constexpr size_t kActBlock = sizeof(quant::BlockQ8_0);
  const __m512i rows = row_offsets16(w_row_bytes);
  const int64_t nb = n / quant::kQK;
  const auto* offset = reinterpret_cast<const int32_t*>(a + rows16_sums_at(n));
  const auto* d_act = reinterpret_cast<const float*>(offset + nb);
  const std::byte* ahead = w + 16 * w_row_bytes;
  const size_t lines = (16 * w_row_bytes + 63) / 64, n_pairs = size_t(nb + 1) / 2;
  size_t prefetched = 0;
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b += 2) {
    const bool both = b + 1 < nb;
    const std::byte* ab = a + size_t(b) * kActBlock + 2;
    const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab));
    __m512i y = place_one<S::kSplit>(y0);
    if (both)
      y = S::kSplit ? load_split(ab, ab + kActBlock)
                    : _mm512_inserti64x4(_mm512_castsi256_si512(y0),
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab + kActBlock)), 1);
    const std::byte* wb = w + size_t(b) * S::kBlockBytes;
    __m512i v[16];
    // This step's share of the next rows' lines, one or two after each row's loads: a
    // burst of them at once stalled the loads behind it (1 thread: 16.5 against 11 ms
    // for the 640 x 262144 Q8_0 matrix; none at all: 20 ms).
    const size_t first = prefetched, end = lines * (size_t(b) / 2 + 1) / n_pairs;
    for (int r = 0; r < 16; ++r) {
      const std::byte* block = wb + size_t(r) * w_row_bytes;
      const __m512i q = both ? S::pair(block) : place_one<S::kSplit>(S::one(block));
      v[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, y);
      for (const size_t e = first + (end - first) * size_t(r + 1) / 16; prefetched < e; ++prefetched)
        __builtin_prefetch(ahead + 64 * prefetched);
    }
    __m512i s[2];
    reduce_rows16<S::kSplit>(v, s[0], s[1]);
    for (int k = 0; k < (both ? 2 : 1); ++k) {
      const __m512 d = gather_scales16(wb + size_t(k) * S::kBlockBytes, rows);
      const __m512i sum = _mm512_add_epi32(s[k], _mm512_set1_epi32(offset[b + k]));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(d, _mm512_set1_ps(d_act[b + k])), acc);
    }
  }
  _mm512_storeu_ps(out, acc);
}

// The loads of Q8_0-layout blocks (Q8_0, and Q8_W, whose blocks repeat the row's
// scale): codes made unsigned by +128. Rows16Q8 for rows16 (a dword of 16 rows per
// register, gathered), OneQ8 for rows16_one (two blocks of one row, value order).
struct Rows16Q8 {
  static constexpr int kOffset = 128;
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ8_0);
  static void load(const std::byte* wb, __m512i rows, __m512i q[8], __m512& d) {
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    for (int k = 0; k < 8; ++k) q[k] = _mm512_xor_si512(_mm512_i32gather_epi32(rows, wb + 2 + 4 * k, 1), flip);
    d = gather_scales16(wb, rows);
  }
};
struct OneQ8 {
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ8_0);
  static constexpr bool kSplit = false;
  static __m256i codes(const std::byte* b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)); }
  static __m256i one(const std::byte* b) { return _mm256_xor_si256(codes(b), _mm256_set1_epi8(char(0x80))); }
  static __m512i pair(const std::byte* b) {
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(codes(b)), codes(b + kBlockBytes), 1);
    return _mm512_xor_si512(both, _mm512_set1_epi8(char(0x80)));
  }
};

using DotTileFn = void (*)(const void*, size_t, int, const void*, size_t, int, float*, size_t, int64_t);

// A packed dot_tile over rows as pack_rows16 wrote them (their Q8_0 blocks come first,
// so `Other` reads them in place): rows16 over whole groups of 16 rows for every token
// count; rows past the call's last whole group take `Other`, whose sums are per token.
// One token takes rows16_one (the same bits, S: its loads).
template <class C, class S, DotTileFn Other>
void dot_tile_rows16(const void* weights, size_t w_row_bytes, int n_w, const void* packed, size_t p_row_bytes,
                     int n_x, float* out, size_t out_stride, int64_t n) {
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(packed);
  int r = 0;
  for (; r + 16 <= n_w; r += 16)
    if (n_x == 1)
      rows16_one<S>(w + size_t(r) * w_row_bytes, w_row_bytes, a, out + r, n);
    else
      rows16<C>(w + size_t(r) * w_row_bytes, w_row_bytes, a, p_row_bytes, n_x, out + r, out_stride, n);
  if (r < n_w) Other(w + size_t(r) * w_row_bytes, w_row_bytes, n_w - r, a, p_row_bytes, n_x, out + r, out_stride, n);
}

// WeightKernels::Packed of a rows16 format, for SumOrder::batch_invariant.
template <class C, class S, DotTileFn Other>
constexpr WeightKernels::Packed rows16_invariant() {
  return {rows16_row_bytes, pack_rows16<C::kOffset>, dot_tile_rows16<C, S, Other>, 16, 4, true};
}

}  // namespace
}  // namespace ember::cpu::avx512
