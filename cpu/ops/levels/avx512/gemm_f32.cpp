// The AVX-512 level's f32 GEMMs for the flash attention (OpKernels::gemm_nt, gemm_nn):
// P.V with few rows (decode: the query heads of one kv head) takes the small-m kernel of
// cpu/kernels/avx512/gemm_small.cpp, the rest Eigen's products (cpu/kernels/avx2/gemm_f32.cpp,
// the one translation unit that instantiates Eigen). Scores (gemm_nt) take the AVX2
// level's kernels for every shape: its few-row kernel sums each score alike whatever the
// tile's width and rows, which batch-invariant attention needs (a verification step
// sees a key in other tiles than plain decoding does). The AVX-512 one (16 keys per
// transposing reduction, a lone key by a horizontal sum) did not: its 16-key and lone
// sums differed in the last bits ("op kernels: few-row f32 GEMMs ..."), and with the two
// made to agree, speculative Engine requests under H2O with an INT8 cache still drew
// other tokens than plain ones on Zen 4 (tests/real_model/test_speculative_eviction.cpp),
// which the AVX2 kernel passes; the cause was not found (2026-12-05).
#include "cpu/kernels/gemm_f32.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::avx512 {

void gemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc, float alpha) {
  avx2::gemm_nt(m, n, k, a, lda, b, ldb, c, ldc, alpha);
}

void gemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  if (m <= kSmallRows && n % 16 == 0) return gemm_nn_small(m, n, k, a, lda, b, ldb, c, ldc);
  avx2::gemm_nn(m, n, k, a, lda, b, ldb, c, ldc);
}

}  // namespace ember::cpu::avx512
