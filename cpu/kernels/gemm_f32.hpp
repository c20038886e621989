// Small dense f32 matrix products for the CPU ops that are GEMMs at heart
// (attention over many query tokens). Row-major operands with leading strides.
#pragma once

#include "cpu/kernels/kernels.hpp"

namespace ember::cpu {

// Products with at most this many rows take the AVX-512 small-m kernels (decode attention).
constexpr int kSmallRows = 16;

// C[m][n] = alpha * sum_k A[i][k] * B[j][k]   (A times B transposed)
void gemm_nt(Isa isa, int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
             float alpha);
// C[m][n] = sum_k A[i][k] * B[k][j]
void gemm_nn(Isa isa, int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc);

namespace avx512 {
// Few rows (m <= kSmallRows): gemm_nt needs k % 16 == 0, gemm_nn n % 16 == 0.
void gemm_nt_small(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
                   float alpha);
void gemm_nn_small(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc);
}  // namespace avx512

namespace avx2 {
void gemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc, float alpha);
void gemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc);
}  // namespace avx2

}  // namespace ember::cpu
