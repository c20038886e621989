// AVX-512 kernels over the rows8 layout (cpu/kernels/repack.hpp: weights repacked at load,
// 8 rows per group, each block a record of the 8 rows' scales and transposed codes) of
// the 4-bit formats with a free float order: Q4_0 (Q8_0 activations), Q4_1, Q4_G128 and
// Q4_G64 (Q8_1). Two groups per register: the record's code words of group A in the low
// 256 bits and of group B in the high, so that one int32 lane holds one of 16 rows, with
// plain loads (no gathers, unlike rows16.hpp) and the block's float work (one FMA, and one
// for the offset formats' m) shared by 16 rows. A lone group at the end of a call takes
// the same path with the high half a copy of the low, stored under a mask.
//
// Per output: for each block, each 32-value sub-block's integer sum (exact) as
// acc = fma(float(sum), d * d_act, acc), sub-blocks in order, then for the offset formats
// acc = fma(m, sum of the sub-blocks' activation sums, acc): the order of the AVX2 level's
// rows8_32, the same whatever the number of tokens (rows8_one and rows8_batch), so one
// kernel serves decode, prefill and backend::SumOrder::batch_invariant.
//
// C: kBlockBytes, kMin (x = d * q + m with Q8_1 activations; else x = d * (q - kOffset)
// with Q8_0), kOffset, kSub (32-value runs per block sharing d and m).
#pragma once

#include "cpu/kernels/avx512/simd.hpp"
#include "cpu/kernels/kernels.hpp"
#include "cpu/kernels/repack.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"



namespace ember::cpu::avx512 {
namespace {

template <class C>
struct Rows8Rec {
  static constexpr size_t kD = 0, kM = 16, kCodes = C::kMin ? 32 : 16;
  static constexpr size_t kBytes = 8 * C::kBlockBytes;
  static constexpr size_t kActBlock = C::kMin ? sizeof(quant::BlockQ8_1) : sizeof(quant::BlockQ8_0);
  static constexpr size_t kActCodes = C::kMin ? 4 : 2;
  static_assert(kCodes + 128 * size_t(C::kSub) == kBytes, "a record holds exactly the 8 blocks' bytes");
};

inline __m512i two_halves(const std::byte* lo, const std::byte* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)), 1);
}

// f32 of 8 fp16 at lo (lanes 0-7) and 8 at hi (lanes 8-15).
inline __m512 halves_fp16(const std::byte* lo, const std::byte* hi) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(lo));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1));
}

// Codes of sub-block j of the records at ra (rows 0-7) and rb (rows 8-15): q[k] lane r =
// values 4k .. 4k + 3 of row r (k < 4), 16 + 4 (k - 4) .. (k >= 4).
template <class C>
inline void load_codes16(const std::byte* ra, const std::byte* rb, int j, __m512i q[8]) {
  const size_t off = Rows8Rec<C>::kCodes + 128 * size_t(j);
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  for (int k = 0; k < 4; ++k) {
    const __m512i v = two_halves(ra + off + 32 * k, rb + off + 32 * k);
    q[k] = _mm512_and_si512(v, nibble);
    q[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
  }
}

// Integer sums of one sub-block for 16 rows against one activation block's codes, in
// four chains (one token has no other work to hide vpdpbusd's latency behind; the
// integer sums are exact, so the grouping changes no bit).
inline __m512i dot16_codes(__m512i acc, const __m512i q[8], const std::byte* codes) {
  __m512i c[4] = {acc, _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
  for (int k = 0; k < 8; ++k)
    c[k % 4] = _mm512_dpbusd_epi32(c[k % 4], q[k], _mm512_set1_epi32(int32_t(load_u32(codes + 4 * k))));
  return _mm512_add_epi32(_mm512_add_epi32(c[0], c[1]), _mm512_add_epi32(c[2], c[3]));
}

// The same sums in one chain, for batches: the other tokens' chains hide the latency, and
// the three adds that join four chains are saved (the sums are exact: the same bits).
inline __m512i dot16_codes_chain(__m512i acc, const __m512i q[8], const std::byte* codes) {
  for (int k = 0; k < 8; ++k) acc = _mm512_dpbusd_epi32(acc, q[k], _mm512_set1_epi32(int32_t(load_u32(codes + 4 * k))));
  return acc;
}

// The offset formats' activation term of one block: its sub-blocks' Q8_1 sums s, in order.
template <class C>
inline float block_sum(const std::byte* first) {
  float sum = _cvtsh_ss(load_u16(first + 2));
  for (int j = 1; j < C::kSub; ++j) sum += _cvtsh_ss(load_u16(first + size_t(j) * sizeof(quant::BlockQ8_1) + 2));
  return sum;
}

// Symmetric formats: -kOffset * (the sum of activation block b's codes), which matmul
// appended to the row once per op (Repacked::activation_sums = -kOffset).
inline int32_t block_bias(const std::byte* sums, int64_t b) {
  return int32_t(load_u32(sums + size_t(b) * sizeof(int32_t)));
}

inline void store16(float* out, __m512 v, bool both) {
  _mm512_mask_storeu_ps(out, both ? __mmask16(0xffff) : __mmask16(0x00ff), v);
}

// One token against one group (8 rows, lane r = row r): rows8_batch's operations on
// 256-bit registers, lane for lane, so the bits are a batch's. One group at a time keeps
// decode on one stream of records (two groups' records read side by side ran at half
// the bandwidth on Zen 4), and 256-bit operations are single micro-ops there.
template <class C>
void rows8_one(const std::byte* rec0, const std::byte* a, float* out, int64_t nb, const std::byte* sums) {
  using R = Rows8Rec<C>;
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t g = 0; g < nb / C::kSub; ++g) {
    const std::byte* rec = rec0 + size_t(g) * R::kBytes;
    for (size_t off = 0; off < R::kBytes; off += 64) __builtin_prefetch(rec + kPrefetchAhead + off);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + R::kD)));
    for (int j = 0; j < C::kSub; ++j) {
      const int64_t b = g * C::kSub + j;
      const std::byte* ab = a + size_t(b) * R::kActBlock;
      const std::byte* codes = ab + R::kActCodes;
      const std::byte* c = rec + R::kCodes + 128 * size_t(j);
      __m256i ch[4] = {C::kMin ? _mm256_setzero_si256() : _mm256_set1_epi32(block_bias(sums, b)), _mm256_setzero_si256(),
                       _mm256_setzero_si256(), _mm256_setzero_si256()};
      for (int k = 0; k < 4; ++k) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 32 * k));
        ch[k] = _mm256_dpbusd_epi32(ch[k], _mm256_and_si256(v, nibble),
                                    _mm256_set1_epi32(int32_t(load_u32(codes + 4 * k))));
        ch[k] = _mm256_dpbusd_epi32(ch[k], _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble),
                                    _mm256_set1_epi32(int32_t(load_u32(codes + 16 + 4 * k))));
      }
      const __m256i s = _mm256_add_epi32(_mm256_add_epi32(ch[0], ch[1]), _mm256_add_epi32(ch[2], ch[3]));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(_cvtsh_ss(load_u16(ab)))), acc);
    }
    if constexpr (C::kMin)
      acc = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + R::kM))),
                            _mm256_set1_ps(block_sum<C>(a + size_t(g * C::kSub) * R::kActBlock)), acc);
  }
  _mm256_storeu_ps(out, acc);
}

// n_x tokens (up to 32 at a time) against the groups at ra, rb: rows8_one's operations
// per token, each sub-block's codes loaded once for all tokens.
template <class C>
void rows8_batch(const std::byte* ra, const std::byte* rb, const std::byte* a, size_t a_row_bytes, int n_x,
                 float* out, size_t out_stride, int64_t nb, size_t sums_offset) {
  using R = Rows8Rec<C>;
  constexpr int kTokens = 32;
  for (int t0 = 0; t0 < n_x; t0 += kTokens) {
    const int nt = n_x - t0 < kTokens ? n_x - t0 : kTokens;
    __m512 acc[kTokens];
    for (int t = 0; t < nt; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < nb / C::kSub; ++g) {
      const std::byte* pa = ra + size_t(g) * R::kBytes;
      const std::byte* pb = rb + size_t(g) * R::kBytes;
      for (size_t off = 0; off < R::kBytes; off += 64) {
        __builtin_prefetch(pa + kPrefetchAhead + off);
        __builtin_prefetch(pb + kPrefetchAhead + off);
      }
      const __m512 d = halves_fp16(pa + R::kD, pb + R::kD);
      for (int j = 0; j < C::kSub; ++j) {
        const int64_t b = g * C::kSub + j;
        __m512i q[8];
        load_codes16<C>(pa, pb, j, q);
        for (int t = 0; t < nt; ++t) {
          const std::byte* ab = a + size_t(t0 + t) * a_row_bytes + size_t(b) * R::kActBlock;
          const __m512i s = dot16_codes_chain(
              C::kMin ? _mm512_setzero_si512()
                      : _mm512_set1_epi32(block_bias(a + size_t(t0 + t) * a_row_bytes + sums_offset, b)),
              q, ab + R::kActCodes);
          acc[t] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(_cvtsh_ss(load_u16(ab)))), acc[t]);
        }
      }
      if constexpr (C::kMin) {
        const __m512 m = halves_fp16(pa + R::kM, pb + R::kM);
        for (int t = 0; t < nt; ++t) {
          const std::byte* first = a + size_t(t0 + t) * a_row_bytes + size_t(g * C::kSub) * R::kActBlock;
          acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(block_sum<C>(first)), acc[t]);
        }
      }
    }
    for (int t = 0; t < nt; ++t) store16(out + size_t(t0 + t) * out_stride, acc[t], ra != rb);
  }
}

// WeightKernels::Repacked::dot_tile: whole groups of the rows8 layout (n_w a multiple of
// 8), every token count, two groups at a time. The symmetric formats (!kMin) take rows
// with their blocks' code sums (Repacked::activation_sums).
template <class C>
void dot_tile_rows8_repacked(const void* weights, size_t w_row_bytes, int n_w, const void* activations,
                             size_t a_row_bytes, int n_x, float* out, size_t out_stride, int64_t n) {
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(activations);
  const int64_t nb = n / quant::kQK;
  const size_t sums_offset = C::kMin ? 0 : activation_sums_offset(n);
  for (int r = 0; r < n_w; r += 16) {
    const std::byte* ra = w + size_t(r) * w_row_bytes;
    const std::byte* rb = r + 16 <= n_w ? ra + 8 * w_row_bytes : ra;
    if (n_x == 1) {
      rows8_one<C>(ra, a, out + r, nb, a + sums_offset);
      if (rb != ra) rows8_one<C>(rb, a, out + r + 8, nb, a + sums_offset);
    }
    else
      rows8_batch<C>(ra, rb, a, a_row_bytes, n_x, out + r, out_stride, nb, sums_offset);
  }
}

}  // namespace
}  // namespace ember::cpu::avx512
