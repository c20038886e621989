#include "cpu/kernels/gemm_f32.hpp"

namespace ember::cpu {

void gemm_nt(Isa isa, int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
             float alpha) {
#if defined(EMBER_X86)
  if (isa == Isa::avx512 && m <= kSmallRows && k % 16 == 0)
    return avx512::gemm_nt_small(m, n, k, a, lda, b, ldb, c, ldc, alpha);
  if (isa != Isa::scalar) return avx2::gemm_nt(m, n, k, a, lda, b, ldb, c, ldc, alpha);
#endif
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float s = 0.0f;
      for (int t = 0; t < k; ++t) s += a[i * lda + t] * b[j * ldb + t];
      c[i * ldc + j] = alpha * s;
    }
}

void gemm_nn(Isa isa, int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
#if defined(EMBER_X86)
  if (isa == Isa::avx512 && m <= kSmallRows && n % 16 == 0)
    return avx512::gemm_nn_small(m, n, k, a, lda, b, ldb, c, ldc);
  if (isa != Isa::scalar) return avx2::gemm_nn(m, n, k, a, lda, b, ldb, c, ldc);
#endif
  for (int i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    for (int j = 0; j < n; ++j) row[j] = 0.0f;
    for (int t = 0; t < k; ++t) {
      const float w = a[i * lda + t];
      for (int j = 0; j < n; ++j) row[j] += w * b[t * ldb + j];
    }
  }
}

}  // namespace ember::cpu
