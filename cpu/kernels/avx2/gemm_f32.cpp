// f32 GEMMs with Eigen, compiled with the AVX2/FMA flags of this folder.
//
// This is the only translation unit that instantiates Eigen's products, so no
// baseline-ISA copy of the same templates exists for the linker to mix with
// these (an ODR hazard when one library is built with several ISA flags). Zen 4
// and most AVX-512 parts run 256-bit FMAs at full rate, so one AVX2 build serves
// both levels.
//
// Few rows (m <= kSmallRows: the query heads of one kv head, as every batch-invariant
// step has) take the fixed-order kernels below instead: each element of C is summed in
// one order whatever m, n and its place in C are (gemm_nt: eight lanes over k, then one
// fixed reduction tree; gemm_nn: one FMA chain over k per column), so a score or output
// does not depend on how many cells share its tile. Eigen's micro-kernels sum an element
// differently when it falls in a remainder row or column, which made speculative
// verification under H2O differ from plain decoding in the last bits.
#include <immintrin.h>

#include <Eigen/Core>

#include "cpu/kernels/gemm_f32.hpp"

namespace ember::cpu::avx2 {
namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;
using Map = Eigen::Map<RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;

// Sum of eight lanes, always in the same tree.
inline float reduce8(__m256 v) {
  const __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pair = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  return _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)));
}

// k a multiple of 8.
void gemm_nt_small(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
                   float alpha) {
  for (int i = 0; i < m; ++i) {
    const float* q = a + size_t(i) * lda;
    for (int j = 0; j < n; ++j) {
      const float* key = b + size_t(j) * ldb;
      __m256 acc = _mm256_setzero_ps();
      for (int t = 0; t < k; t += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + t), _mm256_loadu_ps(key + t), acc);
      c[size_t(i) * ldc + j] = alpha * reduce8(acc);
    }
  }
}

// n a multiple of 8; four column vectors at a time, then one.
void gemm_nn_small(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  for (int i = 0; i < m; ++i) {
    const float* p = a + size_t(i) * lda;
    float* out = c + size_t(i) * ldc;
    int j = 0;
    for (; j + 32 <= n; j += 32) {
      __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
      for (int t = 0; t < k; ++t) {
        const __m256 w = _mm256_set1_ps(p[t]);
        const float* v = b + size_t(t) * ldb + j;
        acc0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v), acc0);
        acc1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 8), acc1);
        acc2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 16), acc2);
        acc3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 24), acc3);
      }
      _mm256_storeu_ps(out + j, acc0);
      _mm256_storeu_ps(out + j + 8, acc1);
      _mm256_storeu_ps(out + j + 16, acc2);
      _mm256_storeu_ps(out + j + 24, acc3);
    }
    for (; j < n; j += 8) {
      __m256 acc = _mm256_setzero_ps();
      for (int t = 0; t < k; ++t)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(p[t]), _mm256_loadu_ps(b + size_t(t) * ldb + j), acc);
      _mm256_storeu_ps(out + j, acc);
    }
  }
}

}  // namespace

void gemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc, float alpha) {
  if (m <= kSmallRows && k % 8 == 0) return gemm_nt_small(m, n, k, a, lda, b, ldb, c, ldc, alpha);
  const ConstMap A(a, m, k, Eigen::OuterStride<>(lda));
  const ConstMap B(b, n, k, Eigen::OuterStride<>(ldb));
  Map C(c, m, n, Eigen::OuterStride<>(ldc));
  C.noalias() = alpha * (A * B.transpose());
}

void gemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  if (m <= kSmallRows && n % 8 == 0) return gemm_nn_small(m, n, k, a, lda, b, ldb, c, ldc);
  const ConstMap A(a, m, k, Eigen::OuterStride<>(lda));
  const ConstMap B(b, k, n, Eigen::OuterStride<>(ldb));
  Map C(c, m, n, Eigen::OuterStride<>(ldc));
  C.noalias() = A * B;
}

}  // namespace ember::cpu::avx2
