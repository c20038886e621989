// The packed prefill path of Q8_0 at the plain AVX2 level (no VNNI): int16 codes and
// vpmaddwd, in llama.cpp's eight-lane order (lib/quant/lanes.hpp).
//
// The order gives every (row, token) eight float lanes; lane m of block b takes the
// exact integer sum of values 4m .. 4m + 3 and then lane[m] = fma(d_w * d_a,
// float(sum), lane[m]). rows8_lanes.hpp gets that sum with the sign trick (vpsignb,
// vpmaddubsw, vpmaddwd), which with the conversion and the FMA is five instructions
// on the two vector ports that multiply, per 8 rows, token and lane. Here both
// operands are sign-extended to int16 and paired as (4m, 4m + 2) and (4m + 1, 4m + 3),
// so the sum is two vpmaddwd and one vpaddd (which may run on a third port): four
// instructions on those ports. Integer sums are exact in any order, so the bits are
// the same.
//
// Loops: per group of 8 rows and chunk of kI16Chunk blocks, the chunk's codes are
// transposed (lane r = row r, rows8.hpp) and widened once into a buffer on the stack
// that every token of the call reuses; then per tile of up to kI16Tokens tokens and
// lane m the tile's accumulators stay in registers while the blocks of the chunk go by
// in order, each block's d_w * d_a (one multiply per 8 rows, as rows8_lanes) read from
// a small table.
//
// Packed activation row of n values (nb = n / 32 blocks), offsets of i16_layout():
//   [0, nb * 34)    the Q8_0 row itself (the rows after the last whole group of 8
//                   use the plain kernel on it)
//   scales          nb floats, d_a of each block
//   pairs           per chunk of kI16Chunk blocks (the last one shorter),
//                   [m = 0..7][block][2] int32: (a[4m], a[4m + 2]) and
//                   (a[4m + 1], a[4m + 3]) of the block as two int16 each, so that
//                   a token's pairs of one chunk are 8 x 8 x kI16Chunk contiguous bytes
#pragma once

#include <array>
#include <utility>

#include "cpu/kernels/avx2/rows8.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

// Measured on the machine of docs/performance.md: chunks of 32 blocks are slower (L1),
// as are 10 or 12 tokens per register tile; 64 tokens per call halve the widening
// per token against 32.
constexpr int kI16Chunk = 16;   // blocks whose widened codes (8 KiB) are kept at a time
constexpr int kI16Tokens = 8;   // tokens whose accumulators stay in registers
constexpr int kI16Call = 64;    // tokens per pass over a chunk (float lanes on the stack)

struct I16Layout {
  size_t scales, pairs, bytes;
};

inline I16Layout i16_layout(int64_t n) {
  const size_t nb = size_t(n / quant::kQK);
  const auto up = [](size_t v, size_t m) { return (v + m - 1) / m * m; };
  I16Layout l;
  l.scales = up(nb * sizeof(quant::BlockQ8_0), 32);
  l.pairs = up(l.scales + nb * sizeof(float), 32);
  l.bytes = up(l.pairs + nb * 64, 64);
  return l;
}

inline size_t i16_row_bytes(int64_t n) { return i16_layout(n).bytes; }

// Even and odd int16 halves of 32 signed bytes: dword m of `even` holds bytes 4m and
// 4m + 2, of `odd` bytes 4m + 1 and 4m + 3, sign-extended.
inline void widen_pairs(__m256i q, __m256i& even, __m256i& odd) {
  even = _mm256_srai_epi16(_mm256_slli_epi16(q, 8), 8);
  odd = _mm256_srai_epi16(q, 8);
}

// WeightKernels::Packed::pack: a Q8_0 row into the layout above.
inline void pack_i16(const void* activations, void* packed, int64_t n) {
  const auto* a = static_cast<const std::byte*>(activations);
  auto* p = static_cast<std::byte*>(packed);
  const int64_t nb = n / quant::kQK;
  const I16Layout l = i16_layout(n);
  std::memcpy(p, a, size_t(nb) * sizeof(quant::BlockQ8_0));
  auto* scales = reinterpret_cast<float*>(p + l.scales);
  std::byte* pairs = p + l.pairs;
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* block = a + size_t(b) * sizeof(quant::BlockQ8_0);
    scales[b] = half_at(block);
    __m256i even, odd;
    widen_pairs(load256(block + 2), even, odd);
    // lo: (e0 o0 e1 o1 | e4 o4 e5 o5), hi: (e2 o2 e3 o3 | e6 o6 e7 o7), 8 bytes per m.
    alignas(32) uint64_t m8[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(m8), _mm256_unpacklo_epi32(even, odd));
    _mm256_store_si256(reinterpret_cast<__m256i*>(m8 + 4), _mm256_unpackhi_epi32(even, odd));
    static constexpr int kOrder[8] = {0, 1, 4, 5, 2, 3, 6, 7};  // m8[i] is lane m = kOrder[i]
    const int64_t b0 = b / kI16Chunk * kI16Chunk, nbc = std::min<int64_t>(kI16Chunk, nb - b0);
    std::byte* chunk = pairs + size_t(b0) * 64;
    for (int i = 0; i < 8; ++i) std::memcpy(chunk + size_t(kOrder[i] * nbc + (b - b0)) * 8, &m8[i], 8);
  }
}

// Widened codes of one chunk of 8 rows: [m][block][even, odd], lane r = row r.
struct I16Chunk {
  alignas(32) int32_t codes[8][kI16Chunk][2][8];
  __m256 d[kI16Chunk];  // d_w of the 8 rows
};

inline void widen_chunk(const std::byte* w, size_t w_row_bytes, int64_t b0, int nbc, I16Chunk& c) {
  for (int b = 0; b < nbc; ++b) {
    const std::byte* wb = w + size_t(b0 + b) * sizeof(quant::BlockQ8_0);
    __m256i q[8];
    load_transposed8(wb + 2, w_row_bytes, q);
    for (int m = 0; m < 8; ++m) {
      __m256i even, odd;
      widen_pairs(q[m], even, odd);
      _mm256_store_si256(reinterpret_cast<__m256i*>(c.codes[m][b][0]), even);
      _mm256_store_si256(reinterpret_cast<__m256i*>(c.codes[m][b][1]), odd);
    }
    c.d[b] = load_fp16_rows8(wb, w_row_bytes);
  }
}

// T tokens (rows of `pairs[t]`, the pairs of block b0 of lane 0 at index 0), blocks
// [0, nbc) of the chunk; lanes[t][m] holds the accumulators before (if !first) and after.
template <int T>
void i16_tile(const I16Chunk& c, const __m256 (*dd)[kI16Tokens], const std::byte* const* pairs, size_t lane_stride,
              int nbc, bool first, float (*lanes)[8][8]) {
  for (int m = 0; m < 8; ++m) {
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = first ? _mm256_setzero_ps() : _mm256_load_ps(lanes[t][m]);
    const size_t lane_off = size_t(m) * lane_stride;
    for (int b = 0; b < nbc; ++b) {
      const __m256i even = _mm256_load_si256(reinterpret_cast<const __m256i*>(c.codes[m][b][0]));
      const __m256i odd = _mm256_load_si256(reinterpret_cast<const __m256i*>(c.codes[m][b][1]));
      const size_t off = lane_off + size_t(b) * 8;
      for (int t = 0; t < T; ++t) {
        const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(even, bcast32(pairs[t] + off)),
                                           _mm256_madd_epi16(odd, bcast32(pairs[t] + off + 4)));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dd[b][t], acc[t]);
      }
    }
    for (int t = 0; t < T; ++t) _mm256_store_ps(lanes[t][m], acc[t]);
  }
}

using I16TileFn = void (*)(const I16Chunk&, const __m256 (*)[kI16Tokens], const std::byte* const*, size_t, int, bool,
                           float (*)[8][8]);

// One group of 8 rows (w) against n_x packed tokens, results at out[t * out_stride + r].
inline void rows8_i16(const std::byte* w, size_t w_row_bytes, const std::byte* packed, size_t p_row_bytes, int n_x,
                      float* out, size_t out_stride, int64_t n) {
  static constexpr auto tiles = []<int... T>(std::integer_sequence<int, T...>) {
    return std::array<I16TileFn, kI16Tokens + 1>{nullptr, i16_tile<T + 1>...};
  }(std::make_integer_sequence<int, kI16Tokens>{});
  const int64_t nb = n / quant::kQK;
  const I16Layout l = i16_layout(n);
  I16Chunk chunk;
  alignas(32) __m256 dd[kI16Chunk][kI16Tokens];
  alignas(32) float lanes[kI16Call][8][8];  // [token][m][row]
  for (int c0 = 0; c0 < n_x; c0 += kI16Call) {
    const int nc = n_x - c0 < kI16Call ? n_x - c0 : kI16Call;
    for (int64_t b0 = 0; b0 < nb; b0 += kI16Chunk) {
      const int nbc = nb - b0 < kI16Chunk ? int(nb - b0) : kI16Chunk;
      widen_chunk(w, w_row_bytes, b0, nbc, chunk);
      // Prefetch of what the next widen_chunk reads (the next chunk of these rows, else
      // the first of the next 8 rows; past the matrix a prefetch does not fault), spread
      // over the token tiles so that few misses are outstanding at a time.
      const bool last = b0 + nbc == nb;
      const std::byte* next = last ? w + 8 * w_row_bytes : w + size_t(b0 + nbc) * sizeof(quant::BlockQ8_0);
      const size_t ahead =
          size_t(last ? std::min<int64_t>(kI16Chunk, nb) : std::min<int64_t>(kI16Chunk, nb - b0 - nbc)) *
          sizeof(quant::BlockQ8_0);
      const int n_tiles = (nc + kI16Tokens - 1) / kI16Tokens;
      for (int t0 = 0, tile = 0; t0 < nc; t0 += kI16Tokens, ++tile) {
        const int nt = nc - t0 < kI16Tokens ? nc - t0 : kI16Tokens;
        for (int r = tile * 8 / n_tiles; r < (tile + 1) * 8 / n_tiles; ++r)
            for (size_t o = 0; o < ahead; o += 64) __builtin_prefetch(next + size_t(r) * w_row_bytes + o);
        const std::byte* pairs[kI16Tokens];
        for (int t = 0; t < nt; ++t) {
          const std::byte* row = packed + size_t(c0 + t0 + t) * p_row_bytes;
          const auto* scales = reinterpret_cast<const float*>(row + l.scales) + b0;
          for (int b = 0; b < nbc; ++b) dd[b][t] = _mm256_mul_ps(chunk.d[b], _mm256_broadcast_ss(scales + b));
          pairs[t] = row + l.pairs + size_t(b0) * 64;
        }
        tiles[nt](chunk, dd, pairs, size_t(nbc) * 8, nbc, b0 == 0, lanes + t0);
      }
    }
    for (int t = 0; t < nc; ++t) store_rows8(out + size_t(c0 + t) * out_stride, lanes8_sum_rows8(lanes[t]));
  }
}

// WeightKernels::Packed::dot_tile: whole groups of 8 rows above, the rest with `Other`
// (a plain dot_tile) on the Q8_0 rows at the start of the packed ones.
template <DotTileFn Other>
void dot_tile_i16(const void* weights, size_t w_row_bytes, int n_w, const void* packed, size_t p_row_bytes, int n_x,
                  float* out, size_t out_stride, int64_t n) {
  const auto* p = static_cast<const std::byte*>(packed);
  over_row_groups<Other>(weights, w_row_bytes, n_w, packed, p_row_bytes, n_x, out, out_stride, n,
                         [&](const std::byte* w, float* o) {
                           rows8_i16(w, w_row_bytes, p, p_row_bytes, n_x, o, out_stride, n);
                         });
}

}  // namespace
}  // namespace ember::cpu::EMBER_AVX2_NS
