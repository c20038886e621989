// AVX2 batches of the 32-value formats whose float order is free (Q4_0, Q4_1, Q5_1;
// Q8_0 and Q5_0 keep llama.cpp's eight-lane order, lanes.hpp), 8 weight rows per
// register (rows8.hpp). Per block and token: eight vpmaddubsw of the rows' transposed
// codes by the token's dwords, summed in int16 (4-bit codes: 8 * 2 * 15 * 128 < 2^15;
// 5-bit codes in two halves), one vpmaddwd to int32, then one FMA for 8 rows.
//
// C (the format): kBlockBytes, kCodes (offset of the 16 nibble bytes), kBits (4 or 5),
// kMin (x = d * q + m with Q8_1 activations; else x = d * (q - kOffset) with Q8_0),
// kOffset, and for 5 bits kHigh (offset of the 4 qh bytes). Optional kSub: a block
// of kSub * 32 values sharing one d (and m), its codes kSub runs of 16 bytes from
// kCodes (Q4_G128, Q4_G64); 1 where absent.
#pragma once

#include <vector>

#include "cpu/kernels/avx2/rows8.hpp"
#include "cpu/kernels/repack.hpp"
#include "cpu/kernels/tile.hpp"
#include "cpu/kernels/unroll.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

// 32-value sub-blocks per block of format C.
template <class C>
constexpr int64_t kSubBlocks = [] {
  if constexpr (requires { C::kSub; }) return int64_t(C::kSub);
  return int64_t(1);
}();

// Codes of one block of 8 rows: q[k] lane r = values 4k .. 4k + 3 of row r (k < 4) and
// 16 + 4 (k - 4) .. (k >= 4), the order of the activation block's dwords; from the
// transposed nibble bytes (bytes[k] lane r = dword k of row r) and, for 5 bits, the
// rows' qh words (lane r).
template <class C>
inline void expand_codes_rows8(const __m256i bytes[4], __m256i h, __m256i q[8]) {
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  for (int k = 0; k < 4; ++k) {
    q[k] = _mm256_and_si256(bytes[k], nibble);
    q[4 + k] = _mm256_and_si256(_mm256_srli_epi16(bytes[k], 4), nibble);
  }
  if constexpr (C::kBits == 5) {
    // Bit v of qh is the fifth bit of value v; a multiply by 2^4 + 2^11 + 2^18 + 2^25
    // moves bit j of a nibble to bit 4 of byte j.
    const __m256i spread = _mm256_set1_epi32(0x02040810), bit4 = _mm256_set1_epi32(0x10101010);
    const __m256i four = _mm256_set1_epi32(0xf);
    for (int k = 0; k < 8; ++k) {
      const __m256i bits = _mm256_and_si256(_mm256_srli_epi32(h, 4 * k), four);
      q[k] = _mm256_or_si256(q[k], _mm256_and_si256(_mm256_mullo_epi32(bits, spread), bit4));
    }
  }
}

// The codes of sub-block j of one block of 8 rows in the file's layout (rows `stride`
// bytes apart).
template <class C>
inline void load_codes_rows8(const std::byte* block, size_t stride, __m256i q[8], int64_t j = 0) {
  __m256i bytes[4];
  load_transposed8_half(block + C::kCodes + 16 * size_t(j), stride, bytes);
  __m256i h = _mm256_setzero_si256();
  if constexpr (C::kBits == 5) {
    alignas(32) uint32_t qh[8];
    for (int r = 0; r < 8; ++r) qh[r] = load_u32(block + size_t(r) * stride + C::kHigh);
    h = _mm256_load_si256(reinterpret_cast<const __m256i*>(qh));
  }
  expand_codes_rows8<C>(bytes, h, q);
}

// The offset formats' activation term of one block: the sum of its sub-blocks' Q8_1
// sums s (in order), at `first` = the block's first activation sub-block. One FMA with
// the block's m per block, not per sub-block.
template <class C>
inline float block_act_sum(const std::byte* first) {
  float sum = half_at(first + 2);
  for (int64_t j = 1; j < kSubBlocks<C>; ++j) sum += half_at(first + size_t(j) * sizeof(quant::BlockQ8_1) + 2);
  return sum;
}

// Offsets in a record of the rows8 layout (cpu/kernels/repack.hpp): one block of 8 rows.
template <class C>
struct Rows8Record {
  static constexpr size_t kD = 0, kM = 16, kQh = C::kMin ? 32 : 16, kCodes = kQh + (C::kBits == 5 ? 32 : 0);
  static constexpr size_t kBytes = 8 * C::kBlockBytes;
  static_assert(kCodes + 128 * kSubBlocks<C> == kBytes, "a record holds exactly the 8 blocks' bytes");
};

// The codes of sub-block j of one record of the rows8 layout.
template <class C>
inline void load_codes_record(const std::byte* rec, __m256i q[8], int64_t j = 0) {
  using R = Rows8Record<C>;
  const std::byte* c = rec + R::kCodes + 128 * size_t(j);
  const __m256i bytes[4] = {load256(c), load256(c + 32), load256(c + 64), load256(c + 96)};
  expand_codes_rows8<C>(bytes, C::kBits == 5 ? load256(rec + R::kQh) : _mm256_setzero_si256(), q);
}

// Integer dot products of one block for 8 rows (lane r) with one activation block's codes.
template <class C>
inline __m256i block_dot_rows8(__m256i acc, const __m256i q[8], const std::byte* codes) {
  if constexpr (C::kBits == 4 || kVnni) return dot_rows8<8>(acc, q, codes);
  return dot_rows8<4>(dot_rows8<4>(acc, q, codes), q + 4, codes + 16);
}

// Symmetric formats: -kOffset * (the sum of each activation block's codes) per token and
// block, taken once per call into `sums` (one int32 per block, token t's at t * nb) for
// rows8_32 on the file layout; weights repacked at load read the same values, which
// matmul appended to each activation row once per op (Repacked::activation_sums = -kOffset).
template <class C>
void prepare_sums_rows8(const std::byte* a, size_t a_row_bytes, int n_x, int64_t nb, int32_t* sums) {
  for (int t = 0; t < n_x; ++t)
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i y = load256(a + size_t(t) * a_row_bytes + size_t(b) * sizeof(quant::BlockQ8_0) + 2);
      sums[size_t(t) * size_t(nb) + size_t(b)] = -C::kOffset * hsum_i32(sum_pairs(_mm256_maddubs_epi16(_mm256_set1_epi8(1), y)));
    }
}

// Block b's entry of a token's sums.
inline int32_t block_bias(const std::byte* sums, int64_t b) {
  return int32_t(load_u32(sums + size_t(b) * sizeof(int32_t)));
}

// 8 weight rows (file layout, rows w_row_bytes apart; or, kRepacked, one group of the
// rows8 layout) by n_x activation rows.
template <class C, bool kRepacked = false>
void rows8_32(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, int n_x, float* out,
              size_t out_stride, int64_t n, const std::byte* sums, size_t sums_stride) {
  using R = Rows8Record<C>;
  constexpr size_t kActBlock = C::kMin ? sizeof(quant::BlockQ8_1) : sizeof(quant::BlockQ8_0);
  constexpr size_t kActCodes = C::kMin ? 4 : 2;
  const int64_t nb = n / quant::kQK;
  for (int t0 = 0; t0 < n_x; t0 += kRows8Tokens) {
    const int nt = n_x - t0 < kRows8Tokens ? n_x - t0 : kRows8Tokens;
    alignas(32) float acc[kRows8Tokens][8];
    for (int t = 0; t < nt; ++t) _mm256_store_ps(acc[t], _mm256_setzero_ps());
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t block = b / kSubBlocks<C>, j = b % kSubBlocks<C>;
      __m256i q[8];
      __m256 d, m = _mm256_setzero_ps();
      if constexpr (kRepacked) {
        const std::byte* rec = w + size_t(block) * R::kBytes;
        if (j == 0)
          for (size_t off = 0; off < R::kBytes; off += 64) __builtin_prefetch(rec + kPrefetchAhead + off);
        load_codes_record<C>(rec, q, j);
        d = _mm256_cvtph_ps(load128(rec + R::kD));
        if constexpr (C::kMin) m = _mm256_cvtph_ps(load128(rec + R::kM));
      } else {
        const std::byte* wb = w + size_t(block) * C::kBlockBytes;
        load_codes_rows8<C>(wb, w_row_bytes, q, j);
        d = load_fp16_rows8(wb, w_row_bytes);
        if constexpr (C::kMin) m = load_fp16_rows8(wb + 2, w_row_bytes);
      }
      for (int t = 0; t < nt; ++t) {
        const std::byte* ab = a + size_t(t0 + t) * a_row_bytes + size_t(b) * kActBlock;
        const __m256i s = block_dot_rows8<C>(
            C::kMin ? _mm256_setzero_si256() : _mm256_set1_epi32(block_bias(sums + size_t(t0 + t) * sums_stride, b)),
            q, ab + kActCodes);
        __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(half_at(ab))),
                                   _mm256_load_ps(acc[t]));
        if constexpr (C::kMin)
          if (j == kSubBlocks<C> - 1) v = _mm256_fmadd_ps(m, _mm256_set1_ps(block_act_sum<C>(ab - j * kActBlock)), v);
        _mm256_store_ps(acc[t], v);
      }
    }
    for (int t = 0; t < nt; ++t) store_rows8(out + size_t(t0 + t) * out_stride, _mm256_load_ps(acc[t]));
  }
}

// WeightKernels::dot_tile: one token with `Other` (the step kernel: rows_sequential),
// batches with rows8_32 over whole groups of 8 rows and `Other` for the rest.
template <class C, DotTileFn Other>
void dot_tile_rows8_32(const void* weights, size_t w_row_bytes, int n_w, const void* activations,
                       size_t a_row_bytes, int n_x, float* out, size_t out_stride, int64_t n) {
  if (n_x == 1 || n % quant::kQK != 0) {
    Other(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n);
    return;
  }
  const auto* a = static_cast<const std::byte*>(activations);
  const int64_t nb = n / quant::kQK;
  thread_local std::vector<int32_t> sums;
  if (!C::kMin && n_w >= kRows8) {
    if (sums.size() < size_t(n_x) * size_t(nb)) sums.resize(size_t(n_x) * size_t(nb));
    prepare_sums_rows8<C>(a, a_row_bytes, n_x, nb, sums.data());
  }
  const auto* sum_bytes = reinterpret_cast<const std::byte*>(sums.data());
  over_row_groups<Other>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n,
                         [&](const std::byte* w, float* o) {
                           rows8_32<C>(w, w_row_bytes, a, a_row_bytes, n_x, o, out_stride, n, sum_bytes,
                                       size_t(nb) * sizeof(int32_t));
                         });
}

// One activation row against one group of the rows8 layout, the accumulator in a
// register: the same operations in the same order as rows8_32<C, true> for one token
// (so its results are bit-identical to a batch's), without the accumulator's round
// trip through memory per block, which bounds a one-token pass.
template <class C>
inline void rows8_32_one(const std::byte* w, const std::byte* a, float* out, int64_t nb, const std::byte* sums) {
  using R = Rows8Record<C>;
  constexpr size_t kActBlock = C::kMin ? sizeof(quant::BlockQ8_1) : sizeof(quant::BlockQ8_0);
  constexpr size_t kActCodes = C::kMin ? 4 : 2;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t g = 0; g < nb / kSubBlocks<C>; ++g) {
    const std::byte* rec = w + size_t(g) * R::kBytes;
    // A record spans 2-17 cache lines; the prefetchers alone fall behind one stream.
    for (size_t off = 0; off < R::kBytes; off += 64) __builtin_prefetch(rec + kPrefetchAhead + off);
    // The record's scales (and offsets), once for its sub-blocks.
    const __m256 d = _mm256_cvtph_ps(load128(rec + R::kD));
    const __m256 m = C::kMin ? _mm256_cvtph_ps(load128(rec + R::kM)) : _mm256_setzero_ps();
    unroll<int(kSubBlocks<C>)>([&](auto jc) {
      constexpr int64_t j = decltype(jc)::value;
      const int64_t b = g * kSubBlocks<C> + j;
      const std::byte* ab = a + size_t(b) * kActBlock;
      __m256i q[8];
      load_codes_record<C>(rec, q, j);
      const __m256i s = block_dot_rows8<C>(
          C::kMin ? _mm256_setzero_si256() : _mm256_set1_epi32(block_bias(sums, b)), q, ab + kActCodes);
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(half_at(ab))), acc);
    });
    if constexpr (C::kMin)
      acc = _mm256_fmadd_ps(m, _mm256_set1_ps(block_act_sum<C>(a + size_t(g * kSubBlocks<C>) * kActBlock)), acc);
  }
  store_rows8(out, acc);
}

// WeightKernels::Repacked::dot_tile: whole groups of the rows8 layout, every token
// count. Each token's sums run in the same order whatever n_x. The symmetric formats
// (!kMin) take rows with their blocks' code sums (Repacked::activation_sums).
template <class C>
void dot_tile_rows8_32_repacked(const void* weights, size_t w_row_bytes, int n_w, const void* activations,
                                size_t a_row_bytes, int n_x, float* out, size_t out_stride, int64_t n) {
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(activations);
  const int64_t nb = n / quant::kQK;
  const size_t sums_offset = C::kMin ? 0 : activation_sums_offset(n);
  for (int r = 0; r < n_w; r += kRows8) {
    if (n_x == 1) {
      rows8_32_one<C>(w + size_t(r) * w_row_bytes, a, out + r, nb, a + sums_offset);
    } else {
      rows8_32<C, true>(w + size_t(r) * w_row_bytes, w_row_bytes, a, a_row_bytes, n_x, out + r, out_stride, n,
                        a + sums_offset, a_row_bytes);
    }
  }
}

}  // namespace
}  // namespace ember::cpu::EMBER_AVX2_NS
