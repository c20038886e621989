// AVX2 batches of Q8_0 and Q5_0 weights in llama.cpp's eight-lane order (quant/lanes.hpp),
// 8 weight rows per register (rows8.hpp). The order gives every (row, token) eight
// float lanes, lane m taking the integer sum of values 4m .. 4m + 3 of each block:
// lane[m] = fma(d_w * d_a, float(sum_m), lane[m]). With the codes of 8 rows transposed
// (register m: dword m of every row), lane m of all 8 rows is one register, so per
// block and token each dword costs one integer dot product (vpmaddubsw + vpmaddwd, or
// one vpdpbusd) and one conversion and FMA for 8 rows, the same float operations in
// the same order as the one-row kernels; the weights are unpacked once per block for
// every token of the call instead of once per 4 tokens, and d_w * d_a is one multiply
// per 8 rows.
//
// C: kBlockBytes, kOffset (Q5_0: 16; Q8_0: 0 = sign trick, or 128 on the avx2vnni
// level: codes stored + 128), load(block, stride, q[8]) giving unsigned transposed
// codes (for kOffset == 0: the signed codes).
#pragma once

#include <vector>

#include "cpu/kernels/avx2/rows8.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

// Per token and block, prepared once per call (rows8_lanes reuses them for every group
// of 8 rows): the activation scale as float and, for formats with a code offset,
// -kOffset * (sum of dword m's codes) for m = 0..7, read back with broadcasts from
// memory (no shuffles in the inner loop).
struct ActLanes {
  alignas(32) int32_t bias[8];
  float d;
};

template <int kOffset>
void prepare_act_lanes(const std::byte* a, size_t a_row_bytes, int n_x, int64_t nb, ActLanes* prepared) {
  for (int t = 0; t < n_x; ++t)
    for (int64_t b = 0; b < nb; ++b) {
      const std::byte* ab = a + size_t(t) * a_row_bytes + size_t(b) * sizeof(quant::BlockQ8_0);
      ActLanes& p = prepared[size_t(t) * size_t(nb) + size_t(b)];
      p.d = half_at(ab);
      if constexpr (kOffset != 0)
        _mm256_store_si256(reinterpret_cast<__m256i*>(p.bias),
                           _mm256_mullo_epi32(sum_pairs(_mm256_maddubs_epi16(_mm256_set1_epi8(1), load256(ab + 2))),
                                              _mm256_set1_epi32(-kOffset)));
    }
}

template <class C>
void rows8_lanes(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, int n_x, float* out,
                 size_t out_stride, int64_t n, const ActLanes* prepared) {
  constexpr size_t kActBlock = sizeof(quant::BlockQ8_0);
  const int64_t nb = n / quant::kQK;
  for (int t0 = 0; t0 < n_x; t0 += kRows8Tokens) {
    const int nt = n_x - t0 < kRows8Tokens ? n_x - t0 : kRows8Tokens;
    alignas(32) float lanes[kRows8Tokens][8][8];  // [token][m][row]
    for (int t = 0; t < nt; ++t)
      for (int m = 0; m < 8; ++m) _mm256_store_ps(lanes[t][m], _mm256_setzero_ps());
    for (int64_t b = 0; b < nb; ++b) {
      const std::byte* wb = w + size_t(b) * C::kBlockBytes;
      __m256i q[8], u[8];  // transposed codes; u: unsigned operand (|q| for the sign trick)
      C::load(wb, w_row_bytes, q);
      for (int m = 0; m < 8; ++m) u[m] = C::kOffset == 0 ? _mm256_abs_epi8(q[m]) : q[m];
      const __m256 d = load_fp16_rows8(wb, w_row_bytes);
      for (int t = 0; t < nt; ++t) {
        const std::byte* y = a + size_t(t0 + t) * a_row_bytes + size_t(b) * kActBlock + 2;
        const ActLanes& p = prepared[size_t(t0 + t) * size_t(nb) + size_t(b)];
        const __m256 dd = _mm256_mul_ps(d, _mm256_broadcast_ss(&p.d));
        for (int m = 0; m < 8; ++m) {
          const __m256i am = bcast32(y + 4 * m);
          __m256i s;
          if constexpr (C::kOffset != 0) {
            s = dot4_add(_mm256_set1_epi32(p.bias[m]), u[m], am);
          } else {
            s = sum_pairs(_mm256_maddubs_epi16(u[m], _mm256_sign_epi8(am, q[m])));
          }
          _mm256_store_ps(lanes[t][m], _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dd, _mm256_load_ps(lanes[t][m])));
        }
      }
    }
    for (int t = 0; t < nt; ++t) store_rows8(out + size_t(t0 + t) * out_stride, lanes8_sum_rows8(lanes[t]));
  }
}

// WeightKernels::dot_tile: one token with `Other` (rows_whole), batches with
// rows8_lanes over whole groups of 8 rows and `Other` for the rest.
template <class C, DotTileFn Other>
void dot_tile_rows8_lanes(const void* weights, size_t w_row_bytes, int n_w, const void* activations,
                          size_t a_row_bytes, int n_x, float* out, size_t out_stride, int64_t n) {
  if (n_x == 1) {
    Other(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n);
    return;
  }
  const auto* a = static_cast<const std::byte*>(activations);
  const int64_t nb = n / quant::kQK;
  thread_local std::vector<ActLanes> prepared;
  if (n_w >= kRows8) {
    if (prepared.size() < size_t(n_x) * size_t(nb)) prepared.resize(size_t(n_x) * size_t(nb));
    prepare_act_lanes<C::kOffset>(a, a_row_bytes, n_x, nb, prepared.data());
  }
  over_row_groups<Other>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n,
                         [&](const std::byte* w, float* o) {
                           rows8_lanes<C>(w, w_row_bytes, a, a_row_bytes, n_x, o, out_stride, n, prepared.data());
                         });
}

}  // namespace
}  // namespace ember::cpu::EMBER_AVX2_NS
