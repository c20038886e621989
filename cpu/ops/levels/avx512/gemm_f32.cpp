// The AVX-512 level's f32 GEMMs for the flash attention (OpKernels::gemm_nt, gemm_nn):
// few rows (decode: the query heads of one kv head) take the small-m kernels of
// cpu/kernels/avx512/gemm_small.cpp, the rest Eigen's products (cpu/kernels/avx2/gemm_f32.cpp,
// the one translation unit that instantiates Eigen).
#include "cpu/kernels/gemm_f32.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::avx512 {

void gemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc, float alpha) {
  if (m <= kSmallRows && k % 16 == 0) return gemm_nt_small(m, n, k, a, lda, b, ldb, c, ldc, alpha);
  avx2::gemm_nt(m, n, k, a, lda, b, ldb, c, ldc, alpha);
}

void gemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  if (m <= kSmallRows && n % 16 == 0) return gemm_nn_small(m, n, k, a, lda, b, ldb, c, ldc);
  avx2::gemm_nn(m, n, k, a, lda, b, ldb, c, ldc);
}

}  // namespace ember::cpu::avx512
