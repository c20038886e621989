// The scalar level's f32 GEMMs for the flash attention (OpKernels::gemm_nt, gemm_nn):
// plain loops, each dot product summed in index order.
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::scalar {

void gemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc, float alpha) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float s = 0.0f;
      for (int t = 0; t < k; ++t) s += a[i * lda + t] * b[j * ldb + t];
      c[i * ldc + j] = alpha * s;
    }
}

void gemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  for (int i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    for (int j = 0; j < n; ++j) row[j] = 0.0f;
    for (int t = 0; t < k; ++t) {
      const float w = a[i * lda + t];
      for (int j = 0; j < n; ++j) row[j] += w * b[t * ldb + j];
    }
  }
}

}  // namespace ember::cpu::scalar
