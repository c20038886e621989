// AVX-512 prefill path of the 32-value formats with a min (WeightKernels::packed):
// Q4_1 and Q5_1. (Q8_0 and Q5_0 run in llama.cpp's order, lanes.hpp; Q4_0 batches
// with one lane per weight row, q4_0.cpp.)
//
// The plain kernels hold two blocks per register, so every block pair of every
// (weight row, token) pays a conversion to float, a scale product and an FMA. Here a
// step is a group of 16 blocks (512 values) and register k holds dword k (codes
// 4k .. 4k + 3) of all 16 blocks, one block per int32 lane: eight vpdpbusd leave
// each lane with its block's whole integer dot product, and the float work is done
// once per 16 blocks. Weights are transposed into that order as they are loaded
// (amortized over the tile's tokens); activations once per op by pack().
//
// Lane L holds block block_of_lane(L) of the group (a fixed permutation that the
// transposition produces without extra shuffles; scales follow it).
//
// Packed activation row: for each whole group, 640 bytes:
//   [0, 512)    int8 codes: 64 bytes per dword k = 0..7 (lane L: dword k of block block_of_lane(L))
//   [512, 576)  per lane: int32 -offset * sum of the block's codes (symmetric weight formats,
//               offset = 8 / 16 / 128), or f32 s (Q8_1, formats with a min)
//   [576, 640)  per lane: f32 activation scale d
// then the blocks after the last whole group, unchanged (plain kernels handle them).
#pragma once

#include "cpu/kernels/avx512/blocks32.hpp"

namespace ember::cpu::avx512 {
namespace {

constexpr int kGroupBlocks = 16;
constexpr int kGroupValues = kGroupBlocks * quant::kQK;
constexpr size_t kGroupBytes = 640;

constexpr int block_of_lane(int lane) { return 4 * (lane % 4) + lane / 4; }

// Byte offsets block_of_lane(L) * stride.
inline __m512i lane_offsets(size_t stride) {
  const __m512i blocks = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  return _mm512_mullo_epi32(blocks, _mm512_set1_epi32(int(stride)));
}

// x[g] holds 16-byte chunks 4g .. 4g + 3 in its 128-bit lanes; out[m] lane L = dword m
// of chunk block_of_lane(L). Four 4 x 4 dword transposes, one per 128-bit lane.
inline void transpose_chunks(const __m512i x[4], __m512i out[4]) {
  const __m512i t0 = _mm512_unpacklo_epi32(x[0], x[1]), t1 = _mm512_unpackhi_epi32(x[0], x[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(x[2], x[3]), t3 = _mm512_unpackhi_epi32(x[2], x[3]);
  out[0] = _mm512_unpacklo_epi64(t0, t2);
  out[1] = _mm512_unpackhi_epi64(t0, t2);
  out[2] = _mm512_unpacklo_epi64(t1, t3);
  out[3] = _mm512_unpackhi_epi64(t1, t3);
}

// Loads the 16-byte chunks at p + i * stride (i = 0..15); out[m] lane L = dword m of
// chunk block_of_lane(L).
inline void load_transposed(const std::byte* p, size_t stride, __m512i out[4]) {
  __m512i x[4];
  for (int g = 0; g < 4; ++g) {
    const std::byte* q = p + size_t(4 * g) * stride;
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + stride)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 2 * stride)), 2);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 3 * stride)), 3);
    x[g] = v;  // 128-bit lane i: chunk 4g + i
  }
  transpose_chunks(x, out);
}

// The fp16 at p + block_of_lane(L) * stride, as f32 (reads 4 bytes: the field and the next two).
inline __m512 gather_fp16(const std::byte* p, size_t stride) {
  const __m512i raw = _mm512_i32gather_epi32(lane_offsets(stride), p, 1);
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(raw));
}
inline __m512i gather_u32(const std::byte* p, size_t stride) {
  return _mm512_i32gather_epi32(lane_offsets(stride), p, 1);
}

// Packs one Q8_0 (kOffset > 0) or Q8_1 (kOffset == 0) row, see the layout above.
template <class ActBlock, int kOffset>
void pack_row(const void* activations, void* packed, int64_t n) {
  constexpr size_t kBlock = sizeof(ActBlock);
  constexpr size_t kCodes = offsetof(ActBlock, qs);
  const auto* src = static_cast<const std::byte*>(activations);
  auto* dst = static_cast<std::byte*>(packed);
  const int64_t groups = n / kGroupValues;
  for (int64_t g = 0; g < groups; ++g, src += kGroupBlocks * kBlock, dst += kGroupBytes) {
    __m512i codes[8];
    load_transposed(src + kCodes, kBlock, codes);
    load_transposed(src + kCodes + 16, kBlock, codes + 4);
    __m512i sum = _mm512_setzero_si512();
    for (int k = 0; k < 8; ++k) {
      _mm512_storeu_si512(dst + 64 * k, codes[k]);
      sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(1), codes[k]);
    }
    if constexpr (kOffset > 0) {
      _mm512_storeu_si512(dst + 512, _mm512_mullo_epi32(sum, _mm512_set1_epi32(-kOffset)));
    } else {
      _mm512_storeu_ps(dst + 512, gather_fp16(src + offsetof(ActBlock, s), kBlock));
    }
    _mm512_storeu_ps(dst + 576, gather_fp16(src, kBlock));
  }
  std::memcpy(dst, src, size_t(n / quant::kQK - groups * kGroupBlocks) * kBlock);
}

template <class ActBlock>
size_t packed_row_bytes(int64_t n) {
  return size_t(n / kGroupValues) * kGroupBytes + size_t(n % kGroupValues / quant::kQK) * sizeof(ActBlock);
}

// Weights of one group: codes in the packed order (q[k] pairs with packed dword k).
struct WtGroup {
  __m512i q[8];
  __m512 d;
  __m512 m;  // formats with a min only
};

// The 4-bit codes of 16 blocks whose 16 code bytes are at p + i * stride: low nibbles
// of dword m are values 4m .. 4m + 3 (q[m]), high nibbles values 16 + 4m .. (q[4 + m]).
inline void load_nibbles_transposed(const std::byte* p, size_t stride, __m512i q[8]) {
  __m512i bytes[4];
  load_transposed(p, stride, bytes);
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  for (int m = 0; m < 4; ++m) {
    q[m] = _mm512_and_si512(bytes[m], nibble);
    q[4 + m] = _mm512_and_si512(_mm512_srli_epi16(bytes[m], 4), nibble);
  }
}

// Adds the fifth bits (qh words, one per lane) to codes in packed order: bits 4k .. 4k + 3
// of qh belong to the 4 bytes of q[k'], k' = k for k < 4 (values 4k..) and 4 + (k - 4) for
// the upper half. A multiply by 2^4 + 2^11 + 2^18 + 2^25 moves bit j of a nibble to bit 4
// of byte j (the four shifted copies do not overlap).
inline void add_high_bits_transposed(__m512i qh, __m512i q[8]) {
  const __m512i spread = _mm512_set1_epi32(0x02040810), bit4 = _mm512_set1_epi32(0x10101010);
  const __m512i nibble = _mm512_set1_epi32(0xf);
  for (int k = 0; k < 8; ++k) {
    const __m512i bits = _mm512_and_si512(_mm512_srli_epi32(qh, 4 * k), nibble);
    q[k] = _mm512_or_si512(q[k], _mm512_and_si512(_mm512_mullo_epi32(bits, spread), bit4));
  }
}

// Step kernel over packed groups; W::load_group(row, group) -> WtGroup, W::kMin says
// whether the format has a min (Q8_1 activations), W::kBlockBytes its block size.
template <class W>
struct PackedStep {
  static constexpr int kStep = kGroupValues;
  using Act = const std::byte*;
  using Wt = WtGroup;
  using Acc = __m512;
  static size_t weight_bytes(int64_t values) { return size_t(values / quant::kQK) * W::kBlockBytes; }
  static size_t packed_bytes(int64_t values) { return size_t(values / kGroupValues) * kGroupBytes; }
  static Acc zero() { return _mm512_setzero_ps(); }
  static Act load_act(const std::byte* a, int64_t s) { return a + size_t(s) * kGroupBytes; }
  static Wt load_w(const std::byte* w, int64_t s) { return W::load_group(w + size_t(s) * kGroupBlocks * W::kBlockBytes); }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    __m512i sum = W::kMin ? _mm512_setzero_si512() : _mm512_loadu_si512(a + 512);
    for (int k = 0; k < 8; ++k) sum = _mm512_dpbusd_epi32(sum, w.q[k], _mm512_loadu_si512(a + 64 * k));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(w.d, _mm512_loadu_ps(a + 576)), acc);
    if constexpr (W::kMin) acc = _mm512_fmadd_ps(w.m, _mm512_loadu_ps(a + 512), acc);
  }
  static float reduce(const Acc& acc) { return hsum(acc); }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

}  // namespace
}  // namespace ember::cpu::avx512
