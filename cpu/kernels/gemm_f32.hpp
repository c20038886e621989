// Small dense f32 matrix products for the CPU ops that are GEMMs at heart (flash
// attention), at the levels that have their own: row-major operands with leading
// strides. The ops reach them through OpKernels::gemm_nt / gemm_nn (op_kernels.hpp).
#pragma once

#include "cpu/kernels/kernels.hpp"

namespace ember::cpu {

// Products with at most this many rows take the AVX-512 small-m kernels (decode attention).
constexpr int kSmallRows = 16;

namespace avx512 {
// Few rows (m <= kSmallRows), n % 16 == 0. (Scores, gemm_nt, take the AVX2 kernel at
// this level too: ops/levels/avx512/gemm_f32.cpp.)
void gemm_nn_small(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc);
}  // namespace avx512

namespace avx2 {
// Few rows (m <= kSmallRows): fixed-order kernels, each element summed alike whatever
// the shape (batch-invariant attention); more rows: Eigen's products, which the
// AVX-512 level uses for more rows too (kernels/avx2/gemm_f32.cpp).
// C[m][n] = alpha * sum_k A[i][k] * B[j][k]   (A times B transposed)
void gemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc, float alpha);
// C[m][n] = sum_k A[i][k] * B[k][j]
void gemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc);
}  // namespace avx2

}  // namespace ember::cpu
