// The AVX-512 level's fused decode-attention kernels over F16 cache rows
// (OpKernels::scores_f16, pv_f16; attention_flash.cpp's lone-token path). They read the
// F16 rows where they lie (cache pages) and convert each 16-value chunk once, in
// registers, for all the query heads of the group: no f32 copy of the tile, no call per
// row. head_dim must be a multiple of 16 (the caller checks).
//
// scores_f16: 16 keys at a time are converted into a 16 x head_dim f32 block on the
// stack (L1); each query head then takes one 16-lane FMA accumulator per key and the 16
// accumulators are reduced to the vector of 16 scores by a transposing tree of shuffles
// (as kernels/avx512/gemm_small.cpp does).
// pv_f16: blocks of kPvRows value rows; per 64-column slice and up to 4 query heads,
// 16 accumulators stay in registers over the block, each converted value chunk feeds
// the 4 heads, and the probabilities come in as embedded broadcasts.
#include <algorithm>

#include "cpu/kernels/avx512/reduce16.hpp"
#include "cpu/kernels/x86_intrinsics.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::avx512 {
namespace {

constexpr int kMaxHeadDim = 512;
constexpr int kPvRows = 32;

inline __m512 f16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// acc[g][x] (G heads x NX 16-column chunks, columns [c0, c0 + 16 NX)) += p[g][j] v_j over
// the block's rows.
template <int G, int NX>
inline void pv_slice(const float* p, int ldp, int hd, const uint16_t* const* rows, int n, float* acc, int c0) {
  __m512 a[G][NX];
  for (int g = 0; g < G; ++g)
    for (int x = 0; x < NX; ++x) a[g][x] = _mm512_loadu_ps(acc + g * hd + c0 + 16 * x);
  for (int j = 0; j < n; ++j) {
    __m512 v[NX];
    for (int x = 0; x < NX; ++x) v[x] = f16x16(rows[j] + c0 + 16 * x);
    for (int g = 0; g < G; ++g) {
      const __m512 w = _mm512_set1_ps(p[g * ldp + j]);
      for (int x = 0; x < NX; ++x) a[g][x] = _mm512_fmadd_ps(w, v[x], a[g][x]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int x = 0; x < NX; ++x) _mm512_storeu_ps(acc + g * hd + c0 + 16 * x, a[g][x]);
}

template <int G>
inline void pv_heads(const float* p, int ldp, int hd, const uint16_t* const* rows, int n, float* acc) {
  int c0 = 0;
  for (; c0 + 64 <= hd; c0 += 64) pv_slice<G, 4>(p, ldp, hd, rows, n, acc, c0);
  for (; c0 < hd; c0 += 16) pv_slice<G, 1>(p, ldp, hd, rows, n, acc, c0);
}

}  // namespace

void scores_f16(const float* q, int group, int hd, const uint16_t* const* rows, int n, float scale, float* s,
                int lds) {
  alignas(64) float keys[16 * kMaxHeadDim];
  const __m512 scale_v = _mm512_set1_ps(scale);
  for (int j0 = 0; j0 < n; j0 += 16) {
    const int jn = std::min(16, n - j0);
    for (int j = 0; j < 16; ++j) {
      float* dst = keys + j * hd;
      if (j < jn) {
        for (int d = 0; d < hd; d += 16) _mm512_store_ps(dst + d, f16x16(rows[j0 + j] + d));
      } else {
        for (int d = 0; d < hd; d += 16) _mm512_store_ps(dst + d, _mm512_setzero_ps());
      }
    }
    const __mmask16 mask = jn == 16 ? __mmask16(0xFFFF) : __mmask16((1u << jn) - 1);
    for (int g = 0; g < group; ++g) {
      const float* qg = q + g * hd;
      __m512 acc[16];
      for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
      for (int d = 0; d < hd; d += 16) {
        const __m512 qv = _mm512_loadu_ps(qg + d);
        for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(qv, _mm512_load_ps(keys + j * hd + d), acc[j]);
      }
      _mm512_mask_storeu_ps(s + g * lds + j0, mask, _mm512_mul_ps(scale_v, reduce16(acc)));
    }
  }
}

void pv_f16(const float* p, int ldp, int group, int hd, const uint16_t* const* rows, int n, float* acc) {
  for (int j0 = 0; j0 < n; j0 += kPvRows) {
    const int jn = std::min(kPvRows, n - j0);
    int g = 0;
    for (; g + 4 <= group; g += 4) pv_heads<4>(p + g * ldp + j0, ldp, hd, rows + j0, jn, acc + g * hd);
    for (; g + 2 <= group; g += 2) pv_heads<2>(p + g * ldp + j0, ldp, hd, rows + j0, jn, acc + g * hd);
    for (; g < group; ++g) pv_heads<1>(p + g * ldp + j0, ldp, hd, rows + j0, jn, acc + g * hd);
  }
}

}  // namespace ember::cpu::avx512
