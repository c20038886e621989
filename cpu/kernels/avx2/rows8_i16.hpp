// Q8_0 batches (8 and more tokens) at the AVX2 levels: int16 codes and vpmaddwd (avx2),
// or vpdpbusd (avx2vnni), in llama.cpp's eight-lane order (lib/quant/lanes.hpp).
//
// The order gives every (row, token) eight float lanes; lane m of block b takes the
// exact integer sum of values 4m .. 4m + 3 and then lane[m] = fma(d_w * d_a,
// float(sum), lane[m]). rows8_lanes.hpp gets that sum with the sign trick (vpsignb,
// vpmaddubsw, vpmaddwd), which with the conversion and the FMA is five instructions
// on the two vector ports that multiply, per 8 rows, token and lane. Here both
// operands are sign-extended to int16 and paired as (4m, 4m + 2) and (4m + 1, 4m + 3),
// so the sum is two vpmaddwd and one vpaddd (which may run on a third port): four
// instructions on those ports. Integer sums are exact in any order, so the bits are
// the same. On the avx2vnni level the sum is one vpdpbusd of the weight codes + 128
// (unsigned) and the activation codes, started from -128 * (sum of the activation
// codes): three instructions; the loops below are the same (rows8_lanes kept the lanes
// on the stack: 1.13x at 128 tokens, 1.35x at 16).
//
// Loops: per group of 8 rows and chunk of kI16Chunk blocks, the chunk's codes are
// transposed (lane r = row r, rows8.hpp) and widened once into a buffer on the stack
// that every token of the call reuses; then per token the eight lanes of the 8 rows
// stay in eight registers while the blocks of the chunk go by in order, the widened
// codes read as memory operands of vpmaddwd, the token's pairs broadcast, and each
// block's d_w * d_a one multiply per 8 rows (as rows8_lanes) shared by the 8 lanes.
// Per block and token: 33 instructions on the multiplying ports for 8 rows x 32 values.
// Tokens go by in pairs (i16_token_pair): one load of a code vector serves both, and a
// token's operands come from 16-byte loads and vpshufd instead of broadcast loads. An
// odd last token goes through as both tokens of a pair, its second result discarded.
//
// Activations: matmul widens them once per op (WeightKernels::packed, dot_tile_i16_packed
// below) and passes blocks of up to kI16Call tokens over all weight rows, so that the
// widened rows of a block stay in L2 (an op-wide copy read again for every chunk of
// weight rows, in matmul's other order, was slower than widening per call: 1.04-1.06x
// the old kernel at 512 tokens instead of 1.06-1.10x). The plain dot_tile widens the
// rows of each call into a buffer per thread. Per token, offsets of i16_layout():
//   scales          nb floats, d_a of each block (nb = n / 32)
//   pairs           [block][m = 0..7][2] int32: (a[4m], a[4m + 2]) and
//                   (a[4m + 1], a[4m + 3]) of the block as two int16 each; on the
//                   avx2vnni level a[4m .. 4m + 3] as bytes and -128 * their sum
#pragma once

#include <cstring>
#include <vector>

#include "cpu/kernels/avx2/rows8_lanes.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

// Measured (bench_kernels, docs/performance.md's machine): chunks of 16 blocks beat 32
// and 64 by 2-5 % with 32-token calls (equal with 512-token ops in 128-token calls). An
// earlier form with 8 tokens x one lane per register tile and a table of d_w * d_a was
// 3 % slower. The packed path below passes up to kI16Call tokens per call (the plain
// dot_tile gets 32 from matmul): the codes of a chunk are widened once per 128 tokens.
constexpr int kI16Chunk = 16;   // blocks whose widened codes (8 KiB) are kept at a time
constexpr int kI16Call = 128;   // tokens per pass over a chunk (float lanes on the stack, 32 KiB)

struct I16Layout {
  size_t pairs, bytes;
};

inline I16Layout i16_layout(int64_t n) {
  const size_t nb = size_t(n / quant::kQK);
  const auto up = [](size_t v, size_t m) { return (v + m - 1) / m * m; };
  I16Layout l;
  l.pairs = up(nb * sizeof(float), 64);
  l.bytes = up(l.pairs + nb * 64, 64);
  return l;
}

// Even and odd int16 halves of 32 signed bytes: dword m of `even` holds bytes 4m and
// 4m + 2, of `odd` bytes 4m + 1 and 4m + 3, sign-extended.
inline void widen_pairs(__m256i q, __m256i& even, __m256i& odd) {
  even = _mm256_srai_epi16(_mm256_slli_epi16(q, 8), 8);
  odd = _mm256_srai_epi16(q, 8);
}

// One Q8_0 row of n values into the layout above at `dst`.
inline void widen_act_row(const std::byte* a, std::byte* dst, int64_t n) {
  const int64_t nb = n / quant::kQK;
  auto* scales = reinterpret_cast<float*>(dst);
  std::byte* pairs = dst + i16_layout(n).pairs;
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* block = a + size_t(b) * sizeof(quant::BlockQ8_0);
    scales[b] = half_at(block);
    __m256i even, odd;
    if constexpr (kVnni) {
      // The codes as they are and -128 * their sum per dword (the weights are stored + 128).
      even = load256(block + 2);
      odd = _mm256_sub_epi32(_mm256_setzero_si256(),
                             _mm256_slli_epi32(sum_pairs(_mm256_maddubs_epi16(_mm256_set1_epi8(1), even)), 7));
    } else {
      widen_pairs(load256(block + 2), even, odd);
    }
    // lo: (e0 o0 e1 o1 | e4 o4 e5 o5), hi: (e2 o2 e3 o3 | e6 o6 e7 o7): lanes m = 0..3, then 4..7.
    const __m256i lo = _mm256_unpacklo_epi32(even, odd), hi = _mm256_unpackhi_epi32(even, odd);
    auto* block_pairs = reinterpret_cast<__m256i*>(pairs + size_t(b) * 64);
    _mm256_storeu_si256(block_pairs, _mm256_permute2x128_si256(lo, hi, 0x20));
    _mm256_storeu_si256(block_pairs + 1, _mm256_permute2x128_si256(lo, hi, 0x31));
  }
}

// Widened codes of one chunk of 8 rows, lane r = row r.
struct I16Chunk {
  static constexpr int kParts = kVnni ? 1 : 2;        // avx2vnni: the codes + 128 as bytes
  alignas(32) int32_t codes[kI16Chunk][8][kParts][8];  // [block][m][even, odd][row]
  __m256 d[kI16Chunk];                                 // d_w of the 8 rows
};

inline void widen_chunk(const std::byte* w, size_t w_row_bytes, int64_t b0, int nbc, I16Chunk& c) {
  for (int b = 0; b < nbc; ++b) {
    const std::byte* wb = w + size_t(b0 + b) * sizeof(quant::BlockQ8_0);
    __m256i q[8];
    load_transposed8(wb + 2, w_row_bytes, q);
    for (int m = 0; m < 8; ++m) {
      if constexpr (kVnni) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(c.codes[b][m][0]),
                           _mm256_xor_si256(q[m], _mm256_set1_epi8(char(0x80))));
      } else {
        __m256i even, odd;
        widen_pairs(q[m], even, odd);
        _mm256_store_si256(reinterpret_cast<__m256i*>(c.codes[b][m][0]), even);
        _mm256_store_si256(reinterpret_cast<__m256i*>(c.codes[b][m][1]), odd);
      }
    }
    c.d[b] = load_fp16_rows8(wb, w_row_bytes);
  }
}

// Two tokens at once, in two passes over the chunk's blocks of four lanes each (lanes
// are independent: each keeps its own order over the blocks), so that the 4 x 2
// accumulators and both tokens' d_w * d_a stay in the 16 registers; a token's operands
// for two lanes come from one 16-byte load copied to both halves and vpshufd, instead
// of four broadcast loads. Per block and token about 23 loads instead of 34 (GCC keeps
// the code vectors as memory operands of both tokens' vpmaddwd; holding them in
// registers spilled an accumulator and was slower). AMD Zen 3 completes ~1.5 256-bit
// loads per cycle, which bounded the one-token loop at ~23 cycles per block and token against
// ~11 for its arithmetic. A micro-benchmark of the two loops (data in L2, Zen 3): 7.4 ->
// 5.8 ns per block and token; bench_kernels Q8_0 avx2 2048 x 2048, 128 tokens, 1 thread
// (with the L2-sized token blocks of cpu/ops/matmul.cpp): 16.5 -> 14.6 ms, best of 20.
template <int kSel>
inline __m256i lane_operand(__m256i q) {
  return _mm256_shuffle_epi32(q, kSel * 0x55);
}

// Lane kK of the two lanes in q0 / q1 (one token each): its exact integer sums for the 8 rows.
template <int kK>
inline void pair_sums(const int32_t (&codes)[kVnni ? 1 : 2][8], __m256i q0, __m256i q1, __m256i& s0, __m256i& s1) {
  if constexpr (kVnni) {
    const __m256i u = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes[0]));
    s0 = dot4_add(lane_operand<2 * kK + 1>(q0), u, lane_operand<2 * kK>(q0));
    s1 = dot4_add(lane_operand<2 * kK + 1>(q1), u, lane_operand<2 * kK>(q1));
  } else {
    const __m256i even = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes[0]));
    const __m256i odd = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes[1]));
    s0 = _mm256_add_epi32(_mm256_madd_epi16(even, lane_operand<2 * kK>(q0)),
                          _mm256_madd_epi16(odd, lane_operand<2 * kK + 1>(q0)));
    s1 = _mm256_add_epi32(_mm256_madd_epi16(even, lane_operand<2 * kK>(q1)),
                          _mm256_madd_epi16(odd, lane_operand<2 * kK + 1>(q1)));
  }
}

// Lanes h .. h + 3 of two tokens over the chunk's blocks.
template <int kH>
inline void i16_pair_half(const I16Chunk& c, const std::byte* pairs0, const float* scales0, const std::byte* pairs1,
                          const float* scales1, int nbc, bool first, float (&lanes0)[8][8], float (&lanes1)[8][8]) {
  __m256 a00, a01, a02, a03, a10, a11, a12, a13;
  if (first) {
    a00 = a01 = a02 = a03 = a10 = a11 = a12 = a13 = _mm256_setzero_ps();
  } else {
    a00 = _mm256_load_ps(lanes0[kH]), a01 = _mm256_load_ps(lanes0[kH + 1]);
    a02 = _mm256_load_ps(lanes0[kH + 2]), a03 = _mm256_load_ps(lanes0[kH + 3]);
    a10 = _mm256_load_ps(lanes1[kH]), a11 = _mm256_load_ps(lanes1[kH + 1]);
    a12 = _mm256_load_ps(lanes1[kH + 2]), a13 = _mm256_load_ps(lanes1[kH + 3]);
  }
  for (int b = 0; b < nbc; ++b) {
    const __m256 dd0 = _mm256_mul_ps(c.d[b], _mm256_broadcast_ss(scales0 + b));
    const __m256 dd1 = _mm256_mul_ps(c.d[b], _mm256_broadcast_ss(scales1 + b));
    const std::byte* p0 = pairs0 + size_t(b) * 64 + 8 * kH;
    const std::byte* p1 = pairs1 + size_t(b) * 64 + 8 * kH;
    // Dwords (x_m, y_m, x_m+1, y_m+1) of each token in both 128-bit halves: x, y are the
    // even and odd pairs (avx2), or the codes and -128 * their sum (avx2vnni).
    __m256i q0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0)));
    __m256i q1 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p1)));
    __m256i s0, s1;
    pair_sums<0>(c.codes[b][kH], q0, q1, s0, s1);
    a00 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), dd0, a00);
    a10 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), dd1, a10);
    pair_sums<1>(c.codes[b][kH + 1], q0, q1, s0, s1);
    a01 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), dd0, a01);
    a11 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), dd1, a11);
    q0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + 16)));
    q1 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + 16)));
    pair_sums<0>(c.codes[b][kH + 2], q0, q1, s0, s1);
    a02 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), dd0, a02);
    a12 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), dd1, a12);
    pair_sums<1>(c.codes[b][kH + 3], q0, q1, s0, s1);
    a03 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), dd0, a03);
    a13 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), dd1, a13);
  }
  _mm256_store_ps(lanes0[kH], a00), _mm256_store_ps(lanes0[kH + 1], a01);
  _mm256_store_ps(lanes0[kH + 2], a02), _mm256_store_ps(lanes0[kH + 3], a03);
  _mm256_store_ps(lanes1[kH], a10), _mm256_store_ps(lanes1[kH + 1], a11);
  _mm256_store_ps(lanes1[kH + 2], a12), _mm256_store_ps(lanes1[kH + 3], a13);
}

inline void i16_token_pair(const I16Chunk& c, const std::byte* pairs0, const float* scales0, const std::byte* pairs1,
                           const float* scales1, int nbc, bool first, float (&lanes0)[8][8],
                           float (&lanes1)[8][8]) {
  i16_pair_half<0>(c, pairs0, scales0, pairs1, scales1, nbc, first, lanes0, lanes1);
  i16_pair_half<4>(c, pairs0, scales0, pairs1, scales1, nbc, first, lanes0, lanes1);
}

// One group of 8 rows (w) against n_x widened tokens (rows of `act`, i16_layout), results
// at out[t * out_stride + r].
inline void rows8_i16(const std::byte* w, size_t w_row_bytes, const std::byte* act, size_t act_row_bytes, int n_x,
                      float* out, size_t out_stride, int64_t n) {
  const int64_t nb = n / quant::kQK;
  const I16Layout l = i16_layout(n);
  I16Chunk chunk;
  alignas(32) float lanes[kI16Call][8][8];  // [token][m][row]
  alignas(32) float spare[8][8];            // the discarded twin of an odd last token
  for (int c0 = 0; c0 < n_x; c0 += kI16Call) {
    const int nc = n_x - c0 < kI16Call ? n_x - c0 : kI16Call;
    for (int64_t b0 = 0; b0 < nb; b0 += kI16Chunk) {
      const int nbc = nb - b0 < kI16Chunk ? int(nb - b0) : kI16Chunk;
      widen_chunk(w, w_row_bytes, b0, nbc, chunk);
      // Prefetch of what the next widen_chunk reads (the next chunk of these rows, else
      // the first of the next 8 rows; past the matrix a prefetch does not fault), spread
      // over the tokens so that few misses are outstanding at a time.
      const bool last = b0 + nbc == nb;
      const std::byte* next = last ? w + 8 * w_row_bytes : w + size_t(b0 + nbc) * sizeof(quant::BlockQ8_0);
      const size_t ahead =
          size_t(last ? std::min<int64_t>(kI16Chunk, nb) : std::min<int64_t>(kI16Chunk, nb - b0 - nbc)) *
          sizeof(quant::BlockQ8_0);
      int r_next = 0;  // row r at the first token t with r * nc < (t + 1) * 8 (no division per token)
      for (int t = 0; t < nc; t += 2) {
        const int t_end = t + 2 < nc ? t + 2 : nc;
        for (; r_next < kRows8 && r_next * nc < t_end * kRows8; ++r_next)
          for (size_t o = 0; o < ahead; o += 64) __builtin_prefetch(next + size_t(r_next) * w_row_bytes + o);
        const std::byte* row = act + size_t(c0 + t) * act_row_bytes;
        const bool both = t + 1 < nc;
        const std::byte* row1 = both ? row + act_row_bytes : row;
        i16_token_pair(chunk, row + l.pairs + size_t(b0) * 64, reinterpret_cast<const float*>(row) + b0,
                       row1 + l.pairs + size_t(b0) * 64, reinterpret_cast<const float*>(row1) + b0, nbc, b0 == 0,
                       lanes[t], both ? lanes[t + 1] : spare);
      }
    }
    for (int t = 0; t < nc; ++t) store_rows8(out + size_t(c0 + t) * out_stride, lanes8_sum_rows8(lanes[t]));
  }
}

// Fewer tokens than this use rows8_lanes: the widening of the weights, once per call,
// is then shared by too few tokens.
constexpr int kI16MinTokens = 8;

// WeightKernels::dot_tile: one token with `Other` (rows_whole), small batches with
// rows8_lanes, larger ones with whole groups of 8 rows above and `Other` for the rest.
template <class C, DotTileFn Other>
void dot_tile_i16(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                  int n_x, float* out, size_t out_stride, int64_t n) {
  if (n_x < kI16MinTokens || n_w < kRows8) {
    dot_tile_rows8_lanes<C, Other>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n);
    return;
  }
  const auto* a = static_cast<const std::byte*>(activations);
  const size_t row_bytes = i16_layout(n).bytes;
  thread_local std::vector<std::byte> buffer;
  if (buffer.size() < size_t(n_x) * row_bytes + 64) buffer.resize(size_t(n_x) * row_bytes + 64);
  std::byte* base = buffer.data() + (64 - reinterpret_cast<uintptr_t>(buffer.data()) % 64) % 64;
  for (int t = 0; t < n_x; ++t) widen_act_row(a + size_t(t) * a_row_bytes, base + size_t(t) * row_bytes, n);
  over_row_groups<Other>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n,
                         [&](const std::byte* w, float* o) {
                           rows8_i16(w, w_row_bytes, base, row_bytes, n_x, o, out_stride, n);
                         });
}

// WeightKernels::packed (prefill): matmul converts each activation row once per op into
// its Q8_0 row (what rows8_lanes and `Other` read: fewer than kI16MinTokens tokens, rows
// past the last whole group of 8) followed, at i16_q8_bytes(n), by the widened layout
// above, instead of widening the rows again in every call, i.e. for every chunk of
// weight rows. With Packed::token_block matmul passes over all weight rows per block of
// tokens, so that the widened rows of a block stay in L2 and each weight chunk is
// widened once per block of up to kI16Call tokens (the plain dot_tile: once per 32).
inline size_t i16_q8_bytes(int64_t n) {
  return (size_t(n / quant::kQK) * sizeof(quant::BlockQ8_0) + 63) / 64 * 64;
}

inline size_t i16_packed_row_bytes(int64_t n) { return i16_q8_bytes(n) + i16_layout(n).bytes; }

inline void i16_pack(const void* activations, void* packed, int64_t n) {
  auto* dst = static_cast<std::byte*>(packed);
  std::memcpy(dst, activations, size_t(n / quant::kQK) * sizeof(quant::BlockQ8_0));
  widen_act_row(static_cast<const std::byte*>(activations), dst + i16_q8_bytes(n), n);
}

template <class C, DotTileFn Other>
void dot_tile_i16_packed(const void* weights, size_t w_row_bytes, int n_w, const void* packed, size_t p_row_bytes,
                         int n_x, float* out, size_t out_stride, int64_t n) {
  if (n_x < kI16MinTokens || n_w < kRows8) {
    dot_tile_rows8_lanes<C, Other>(weights, w_row_bytes, n_w, packed, p_row_bytes, n_x, out, out_stride, n);
    return;
  }
  const std::byte* widened = static_cast<const std::byte*>(packed) + i16_q8_bytes(n);
  over_row_groups<Other>(weights, w_row_bytes, n_w, packed, p_row_bytes, n_x, out, out_stride, n,
                         [&](const std::byte* w, float* o) {
                           rows8_i16(w, w_row_bytes, widened, p_row_bytes, n_x, o, out_stride, n);
                         });
}

}  // namespace
}  // namespace ember::cpu::EMBER_AVX2_NS
