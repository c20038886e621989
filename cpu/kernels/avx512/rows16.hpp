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
        __m512i s = _mm512_set1_epi32(offset[b]);
        for (int k = 0; k < 8; ++k) {
          int32_t dw;
          std::memcpy(&dw, y + 4 * k, 4);
          s = _mm512_dpbusd_epi32(s, q[k], _mm512_set1_epi32(dw));
        }
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(d_act[b])), acc[t]);
      }
    }
    for (int t = 0; t < nt; ++t) _mm512_storeu_ps(out + size_t(t0 + t) * out_stride, acc[t]);
  }
}

using DotTileFn = void (*)(const void*, size_t, int, const void*, size_t, int, float*, size_t, int64_t);

// A packed dot_tile over rows as pack_rows16 wrote them (their Q8_0 blocks come first,
// so `Other` reads them in place): rows16 over whole groups of 16 rows for every token
// count; rows past the call's last whole group take `Other`, whose sums are per token.
template <class C, DotTileFn Other>
void dot_tile_rows16(const void* weights, size_t w_row_bytes, int n_w, const void* packed, size_t p_row_bytes,
                     int n_x, float* out, size_t out_stride, int64_t n) {
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(packed);
  int r = 0;
  for (; r + 16 <= n_w; r += 16)
    rows16<C>(w + size_t(r) * w_row_bytes, w_row_bytes, a, p_row_bytes, n_x, out + r, out_stride, n);
  if (r < n_w) Other(w + size_t(r) * w_row_bytes, w_row_bytes, n_w - r, a, p_row_bytes, n_x, out + r, out_stride, n);
}

// WeightKernels::Packed of a rows16 format, for SumOrder::batch_invariant.
template <class C, DotTileFn Other>
constexpr WeightKernels::Packed rows16_invariant() {
  return {rows16_row_bytes, pack_rows16<C::kOffset>, dot_tile_rows16<C, Other>, 16, 4, true};
}

// The scales of 16 rows' blocks (f16 at the start of each block).
inline __m512 gather_scales16(const std::byte* block, __m512i rows) {
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(rows, block, 1)));
}

}  // namespace
}  // namespace ember::cpu::avx512
