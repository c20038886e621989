// AVX-512 prefill path of the super-block formats (WeightKernels::packed), the
// counterpart of packed32.hpp: one int32 lane per sub-block, so vpdpbusd produces
// whole sub-block dot products and the scales are applied once per 16 sub-blocks in
// float, instead of a vpmaddubsw + vpdpwssd pair per 64 codes.
//
// Used by Q5_K (Q4_K and Q6_K run in llama.cpp's order instead, lanes.hpp). A step is
// two super-blocks (16 sub-blocks of 32); register k (k = 0..7)
// holds codes 4k .. 4k + 3 of every sub-block. Lane L holds sub-block j of super-block
// sb with sb = (L % 8) / 4 and j = 2 (L % 4) + L / 8: lanes 0-7 are the sub-blocks of
// low nibbles and 8-15 those of high nibbles, the order an 8 x 8 dword transpose of
// the eight 32-byte code groups gives. Packed activations, 640 bytes per step:
//   [0, 512)    codes: 64 bytes per k (lane L: dword 8j + k of super-block sb's codes)
//   [512, 576)  f32 d_a of super-block sb
//   [576, 640)  f32 d_a * (bsums[2j] + bsums[2j + 1]) of (sb, j)
// A super-block left over (odd count) stays in Q8_K format after the steps.
#pragma once

#include "cpu/kernels/avx512/blocks256.hpp"
#include "cpu/kernels/avx512/packed32.hpp"
#include "cpu/kernels/transpose8x8.hpp"

namespace ember::cpu::avx512 {
namespace {

// ---- Q4_K / Q5_K ----

constexpr int kPairValues = 2 * quant::kQKK;
constexpr size_t kPairBytes = 640;

constexpr int pair_lane_block(int lane) { return (lane % 8) / 4; }
constexpr int pair_lane_sub(int lane) { return 2 * (lane % 4) + lane / 8; }

inline void pack_q8_k_pairs(const void* activations, void* packed, int64_t n) {
  const auto* src = static_cast<const quant::BlockQ8_K*>(activations);
  auto* dst = static_cast<std::byte*>(packed);
  const int64_t pairs = n / kPairValues;
  for (int64_t p = 0; p < pairs; ++p, src += 2, dst += kPairBytes) {
    float d[16], mins[16];
    for (int lane = 0; lane < 16; ++lane) {
      const quant::BlockQ8_K& b = src[pair_lane_block(lane)];
      const int j = pair_lane_sub(lane);
      for (int k = 0; k < 8; ++k) std::memcpy(dst + 64 * k + 4 * lane, b.qs + 32 * j + 4 * k, 4);
      d[lane] = b.d;
      mins[lane] = b.d * float(b.bsums[2 * j] + b.bsums[2 * j + 1]);
    }
    std::memcpy(dst + 512, d, 64);
    std::memcpy(dst + 576, mins, 64);
  }
  std::memcpy(dst, src, size_t(n / quant::kQKK - 2 * pairs) * sizeof(quant::BlockQ8_K));
}

inline size_t packed_pair_row_bytes(int64_t n) {
  return size_t(n / kPairValues) * kPairBytes + size_t(n % kPairValues / quant::kQKK) * sizeof(quant::BlockQ8_K);
}


// Weights of one step: codes in packed order and per-lane float scales.
struct WtKPair {
  __m512i q[8];
  __m512 scale;  // d * sc of the lane's sub-block
  __m512 mins;   // dmin * mn of the lane's sub-block
};

// Codes (low 4 bits) and scales of the two Q4_K / Q5_K super-blocks at b0 and b1;
// `codes` is the offset of the 128 code bytes in a block.
inline void load_k_pair(const std::byte* b0, const std::byte* b1, size_t codes, WtKPair& w) {
  __m256i groups[8], t[8];
  for (int c = 0; c < 8; ++c)
    groups[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>((c < 4 ? b0 : b1) + codes + 32 * (c % 4)));
  transpose_8x8(groups, t);
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  for (int k = 0; k < 8; ++k)
    w.q[k] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(t[k], nibble)),
                                _mm256_and_si256(_mm256_srli_epi16(t[k], 4), nibble), 1);
  // 6-bit scales and mins of both super-blocks, one byte each, rearranged to lane order.
  const KScales8 s0 = unpack_scales(b0 + 4), s1 = unpack_scales(b1 + 4);
  const __m128i lane_order = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const __m128i sc = _mm_shuffle_epi8(_mm_set_epi64x(int64_t(s1.sc), int64_t(s0.sc)), lane_order);
  const __m128i mn = _mm_shuffle_epi8(_mm_set_epi64x(int64_t(s1.mn), int64_t(s0.mn)), lane_order);
  const __mmask16 second = 0xf0f0;  // lanes of super-block 1
  const __m512 d = _mm512_mask_blend_ps(second, _mm512_set1_ps(_cvtsh_ss(load_u16(b0))),
                                        _mm512_set1_ps(_cvtsh_ss(load_u16(b1))));
  const __m512 dmin = _mm512_mask_blend_ps(second, _mm512_set1_ps(_cvtsh_ss(load_u16(b0 + 2))),
                                           _mm512_set1_ps(_cvtsh_ss(load_u16(b1 + 2))));
  w.scale = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc)), d);
  w.mins = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mn)), dmin);
}

// Step kernel over packed pairs of super-blocks; W::load_pair(b0, b1) -> WtKPair.
template <class W>
struct PackedKPairStep {
  static constexpr int kStep = kPairValues;
  using Act = const std::byte*;
  using Wt = WtKPair;
  using Acc = __m512;
  static size_t weight_bytes(int64_t values) { return size_t(values / quant::kQKK) * W::kBlockBytes; }
  static size_t packed_bytes(int64_t values) { return size_t(values / kPairValues) * kPairBytes; }
  static Acc zero() { return _mm512_setzero_ps(); }
  static Act load_act(const std::byte* a, int64_t s) { return a + size_t(s) * kPairBytes; }
  static Wt load_w(const std::byte* w, int64_t s) {
    const std::byte* b0 = w + size_t(s) * 2 * W::kBlockBytes;
    return W::load_pair(b0, b0 + W::kBlockBytes);
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    __m512i sum = _mm512_setzero_si512();
    for (int k = 0; k < 8; ++k) sum = _mm512_dpbusd_epi32(sum, w.q[k], _mm512_loadu_si512(a + 64 * k));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(w.scale, _mm512_loadu_ps(a + 512)), acc);
    acc = _mm512_fnmadd_ps(w.mins, _mm512_loadu_ps(a + 576), acc);
  }
  static float reduce(const Acc& acc) { return hsum(acc); }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

}  // namespace
}  // namespace ember::cpu::avx512
