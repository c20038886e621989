// AVX-512 batches of the 32-value formats with Q8_0 activations, 16 weight rows per
// register: one int32 lane per row, so that each block's float work (one FMA) serves
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
#include "quant/formats.hpp"

namespace ember::cpu::avx512 {
namespace {

// C: kBlockBytes, kOffset (codes are value + kOffset, unsigned), and
//    static void load(const std::byte* block, __m512i rows, __m512i q[8], __m512& d).
// offset[t * nb + b] = -kOffset * (sum of token t's codes in block b), d_act[...] its scale.
template <class C>
void rows16(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, int n_x,
            const int32_t* offset, const float* d_act, float* out, size_t out_stride, int64_t n) {
  constexpr int kTokens = 32;
  constexpr size_t kActBlock = sizeof(quant::BlockQ8_0);
  const __m512i rows = row_offsets16(w_row_bytes);
  const int64_t nb = n / quant::kQK;
  for (int t0 = 0; t0 < n_x; t0 += kTokens) {
    const int nt = n_x - t0 < kTokens ? n_x - t0 : kTokens;
    __m512 acc[kTokens];
    for (int t = 0; t < nt; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m512i q[8];
      __m512 d;
      C::load(w + size_t(b) * C::kBlockBytes, rows, q, d);
      for (int t = 0; t < nt; ++t) {
        const size_t i = size_t(t0 + t) * size_t(nb) + size_t(b);
        const std::byte* y = a + size_t(t0 + t) * a_row_bytes + size_t(b) * kActBlock + 2;
        __m512i s = _mm512_set1_epi32(offset[i]);
        for (int k = 0; k < 8; ++k) {
          int32_t dw;
          std::memcpy(&dw, y + 4 * k, 4);
          s = _mm512_dpbusd_epi32(s, q[k], _mm512_set1_epi32(dw));
        }
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(d_act[i])), acc[t]);
      }
    }
    for (int t = 0; t < nt; ++t) _mm512_storeu_ps(out + size_t(t0 + t) * out_stride, acc[t]);
  }
}

using DotTileFn = void (*)(const void*, size_t, int, const void*, size_t, int, float*, size_t, int64_t);

// WeightKernels::dot_tile (one_token_too = false: one token and calls under 16 rows
// take `Other`) and dot_tile_invariant (true: rows16 for every token count; only the
// rows past the call's last whole group of 16 take `Other`, whose sums are per token).
template <class C, DotTileFn Other>
void dot_tile_rows16(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                     int n_x, float* out, size_t out_stride, int64_t n, bool one_token_too) {
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(activations);
  if ((n_x == 1 && !one_token_too) || n_w < 16) {
    Other(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n);
    return;
  }
  const int64_t nb = n / quant::kQK;
  thread_local std::vector<int32_t> offset;
  thread_local std::vector<float> d_act;
  offset.resize(size_t(n_x) * size_t(nb));
  d_act.resize(offset.size());
  for (int t = 0; t < n_x; ++t)
    for (int64_t b = 0; b < nb; ++b) {
      const std::byte* ab = a + size_t(t) * a_row_bytes + size_t(b) * sizeof(quant::BlockQ8_0);
      const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab + 2));
      const __m256i sum4 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), y);
      offset[size_t(t) * size_t(nb) + size_t(b)] = -C::kOffset * hsum_i32(_mm512_zextsi256_si512(sum4));
      d_act[size_t(t) * size_t(nb) + size_t(b)] = _cvtsh_ss(load_u16(ab));
    }
  int r = 0;
  for (; r + 16 <= n_w; r += 16)
    rows16<C>(w + size_t(r) * w_row_bytes, w_row_bytes, a, a_row_bytes, n_x, offset.data(), d_act.data(), out + r,
              out_stride, n);
  if (r < n_w) Other(w + size_t(r) * w_row_bytes, w_row_bytes, n_w - r, a, a_row_bytes, n_x, out + r, out_stride, n);
}

// The scales of 16 rows' blocks (f16 at the start of each block).
inline __m512 gather_scales16(const std::byte* block, __m512i rows) {
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(rows, block, 1)));
}

}  // namespace
}  // namespace ember::cpu::avx512
