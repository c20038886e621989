// AVX-512 kernels of Q4_0 weights (x = d * (q - 8)) with Q8_0 activations.
#include <vector>

#include "cpu/kernels/avx512/blocks32.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::avx512 {
namespace {

struct Q4_0 {
  static constexpr int kOffset = 8;
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ4_0);
  static WtCodes load(const std::byte* row, int64_t s) {
    const std::byte* b0 = row + size_t(s) * 2 * kBlockBytes;
    const std::byte* b1 = b0 + kBlockBytes;
    return {nibbles_split(b0 + 2, b1 + 2), fp16_pair(load_u16(b0), load_u16(b1))};
  }
  static float ref_dot(const void* w, const void* a, int64_t n) { return quant::ref::dot_q4_0(w, a, n); }
};
using Step = StepQ8_0<Q4_0>;

// Batches: 16 weight rows per register, one int32 lane per row, so that each block's
// float work (one FMA) serves 16 rows. The codes of the 16 rows are gathered a dword
// of each row per register, once per block, and reused by every token (up to 32).
// offset[t * nb + b] = -8 * (sum of token t's codes in block b), d[t * nb + b] its scale.
void rows16(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, int n_x,
            const int32_t* offset, const float* d_act, float* out, size_t out_stride, int64_t n) {
  constexpr int kTokens = 32;
  constexpr size_t kBlock = sizeof(quant::BlockQ4_0), kActBlock = sizeof(quant::BlockQ8_0);
  const __m512i rows = row_offsets16(w_row_bytes);
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  const int64_t nb = n / quant::kQK;
  for (int t0 = 0; t0 < n_x; t0 += kTokens) {
    const int nt = n_x - t0 < kTokens ? n_x - t0 : kTokens;
    __m512 acc[kTokens];
    for (int t = 0; t < nt; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const std::byte* wb = w + size_t(b) * kBlock;
      __m512i q[8];  // q[k]: values 4k .. 4k + 3 of each row
      for (int k = 0; k < 4; ++k) {
        const __m512i v = _mm512_i32gather_epi32(rows, wb + 2 + 4 * k, 1);
        q[k] = _mm512_and_si512(v, nibble);
        q[k + 4] = _mm512_and_si512(_mm512_srli_epi32(v, 4), nibble);
      }
      const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(rows, wb, 1)));
      for (int t = 0; t < nt; ++t) {
        const size_t i = size_t(t0 + t) * size_t(nb) + size_t(b);
        const auto* y = reinterpret_cast<const int32_t*>(a + size_t(t0 + t) * a_row_bytes + size_t(b) * kActBlock + 2);
        __m512i s = _mm512_set1_epi32(offset[i]);
        for (int k = 0; k < 8; ++k) {
          int32_t dw;
          std::memcpy(&dw, y + k, 4);
          s = _mm512_dpbusd_epi32(s, q[k], _mm512_set1_epi32(dw));
        }
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(d_act[i])), acc[t]);
      }
    }
    for (int t = 0; t < nt; ++t) _mm512_storeu_ps(out + size_t(t0 + t) * out_stride, acc[t]);
  }
}

// WeightKernels::dot_tile: one token with rows_sequential, batches with rows16 over
// whole groups of 16 rows and register tiles for the rest.
void dot_tile_q4_0_rows(const void* weights, size_t w_row_bytes, int n_w, const void* activations,
                        size_t a_row_bytes, int n_x, float* out, size_t out_stride, int64_t n, bool one_token_too) {
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(activations);
  if ((n_x == 1 && !one_token_too) || n_w < 16) {
    dot_tile<Step, 4, 4>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n);
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
      offset[size_t(t) * size_t(nb) + size_t(b)] = -8 * hsum_i32(_mm512_zextsi256_si512(sum4));
      d_act[size_t(t) * size_t(nb) + size_t(b)] = _cvtsh_ss(load_u16(ab));
    }
  int r = 0;
  for (; r + 16 <= n_w; r += 16)
    rows16(w + size_t(r) * w_row_bytes, w_row_bytes, a, a_row_bytes, n_x, offset.data(), d_act.data(), out + r,
           out_stride, n);
  if (r < n_w)
    dot_tile<Step, 4, 4>(w + size_t(r) * w_row_bytes, w_row_bytes, n_w - r, a, a_row_bytes, n_x, out + r, out_stride, n);
}

// WeightKernels::dot_tile_invariant: rows16 for every token count, one token too,
// so that a token's sums do not depend on the batch (the tail rows of a call below 16
// take the plain tiles whatever the token count).
void dot_tile_q4_0_invariant(const void* weights, size_t w_row_bytes, int n_w, const void* activations,
                             size_t a_row_bytes, int n_x, float* out, size_t out_stride, int64_t n) {
  dot_tile_q4_0_rows(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n, true);
}

void dot_tile_q4_0(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                   int n_x, float* out, size_t out_stride, int64_t n) {
  dot_tile_q4_0_rows(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n, false);
}

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t b = 0; b < n / quant::kQK; ++b, p += Q4_0::kBlockBytes)
    store_symmetric(dst + b * quant::kQK, nibbles_32(p + 2), 8.0f, _cvtsh_ss(load_u16(p)));
}

constexpr int kTileW = 16, kTileX = 4;  // 16: chunks of whole rows16 groups

}  // namespace

extern const WeightKernels kQ4_0 = {quant::DType::q4_0, quant::DType::q8_0, quantize_q8_0, dot<Step>,
                                    dot_tile_q4_0, dequantize, kTileW, kTileX, {}, nullptr, dot_tile_q4_0_invariant};

}  // namespace ember::cpu::avx512
