// f32 products with few rows for decode attention (cpu/ops/attention_flash.cpp): the
// query heads of one kv head (a handful of rows) against a tile of up to a few hundred
// decoded key or value rows that sit in L1/L2. Eigen's GEMM packs both operands
// first, which for so few rows costs as much as the product; these kernels read the
// tile where it lies.
//
// gemm_nn (out = P V): up to 4 rows x 64 columns of accumulators in registers, each
// value row loaded once and used by the 4 rows.

#include <algorithm>

#include "cpu/kernels/gemm_f32.hpp"
#include "cpu/kernels/x86_intrinsics.hpp"

namespace ember::cpu::avx512 {
namespace {

// C[RB rows][64 * NC / 4 ... ]: RB rows of A times B, columns [j0, j0 + 16 * NC).
template <int RB, int NC>
inline void nn_block(int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc, int j0) {
  __m512 acc[RB][NC];
  for (int r = 0; r < RB; ++r)
    for (int x = 0; x < NC; ++x) acc[r][x] = _mm512_setzero_ps();
  for (int t = 0; t < k; ++t) {
    __m512 bv[NC];
    for (int x = 0; x < NC; ++x) bv[x] = _mm512_loadu_ps(b + size_t(t) * ldb + j0 + 16 * x);
    for (int r = 0; r < RB; ++r) {
      const __m512 w = _mm512_set1_ps(a[size_t(r) * lda + t]);
      for (int x = 0; x < NC; ++x) acc[r][x] = _mm512_fmadd_ps(w, bv[x], acc[r][x]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int x = 0; x < NC; ++x) _mm512_storeu_ps(c + size_t(r) * ldc + j0 + 16 * x, acc[r][x]);
}

template <int RB>
inline void nn_rows(int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  int j0 = 0;
  for (; j0 + 64 <= n; j0 += 64) nn_block<RB, 4>(k, a, lda, b, ldb, c, ldc, j0);
  for (; j0 + 16 <= n; j0 += 16) nn_block<RB, 1>(k, a, lda, b, ldb, c, ldc, j0);
}

}  // namespace

void gemm_nn_small(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  int i = 0;
  for (; i + 4 <= m; i += 4) nn_rows<4>(n, k, a + size_t(i) * lda, lda, b, ldb, c + size_t(i) * ldc, ldc);
  for (; i + 2 <= m; i += 2) nn_rows<2>(n, k, a + size_t(i) * lda, lda, b, ldb, c + size_t(i) * ldc, ldc);
  for (; i < m; ++i) nn_rows<1>(n, k, a + size_t(i) * lda, lda, b, ldb, c + size_t(i) * ldc, ldc);
}

}  // namespace ember::cpu::avx512
