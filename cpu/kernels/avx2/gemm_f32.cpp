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

// Keys j0 .. j0 + NK - 1 against rows i0 .. i0 + NR - 1; k a multiple of 8. Each
// element has its own accumulator, so its sum does not depend on NR or NK.
template <int NR, int NK>
inline void nt_tile(int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc, float alpha) {
  __m256 acc[NR][NK];
  for (int r = 0; r < NR; ++r)
    for (int x = 0; x < NK; ++x) acc[r][x] = _mm256_setzero_ps();
  for (int t = 0; t < k; t += 8) {
    __m256 kv[NK];
    for (int x = 0; x < NK; ++x) kv[x] = _mm256_loadu_ps(b + size_t(x) * ldb + t);
    for (int r = 0; r < NR; ++r) {
      const __m256 qv = _mm256_loadu_ps(a + size_t(r) * lda + t);
      for (int x = 0; x < NK; ++x) acc[r][x] = _mm256_fmadd_ps(qv, kv[x], acc[r][x]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int x = 0; x < NK; ++x) c[size_t(r) * ldc + x] = alpha * reduce8(acc[r][x]);
}

template <int NR>
inline void nt_rows(int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc, float alpha) {
  int j = 0;
  for (; j + 4 <= n; j += 4) nt_tile<NR, 4>(k, a, lda, b + size_t(j) * ldb, ldb, c + j, ldc, alpha);
  for (; j < n; ++j) nt_tile<NR, 1>(k, a, lda, b + size_t(j) * ldb, ldb, c + j, ldc, alpha);
}

// k a multiple of 8: tiles of 2 query rows x 4 keys (8 accumulators, the key rows
// loaded once for both query rows).
void gemm_nt_small(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc,
                   float alpha) {
  int i = 0;
  for (; i + 2 <= m; i += 2) nt_rows<2>(n, k, a + size_t(i) * lda, lda, b, ldb, c + size_t(i) * ldc, ldc, alpha);
  if (i < m) nt_rows<1>(n, k, a + size_t(i) * lda, lda, b, ldb, c + size_t(i) * ldc, ldc, alpha);
}

// Columns j0 .. j0 + 8 NC - 1 of rows i0 .. i0 + NR - 1: one FMA chain over k per
// element, from zero, whatever NR and NC (the value rows loaded once for the NR rows).
template <int NR, int NC>
inline void nn_tile(int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  __m256 acc[NR][NC];
  for (int r = 0; r < NR; ++r)
    for (int x = 0; x < NC; ++x) acc[r][x] = _mm256_setzero_ps();
  for (int t = 0; t < k; ++t) {
    __m256 v[NC];
    for (int x = 0; x < NC; ++x) v[x] = _mm256_loadu_ps(b + size_t(t) * ldb + 8 * x);
    for (int r = 0; r < NR; ++r) {
      const __m256 w = _mm256_set1_ps(a[size_t(r) * lda + t]);
      for (int x = 0; x < NC; ++x) acc[r][x] = _mm256_fmadd_ps(w, v[x], acc[r][x]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int x = 0; x < NC; ++x) _mm256_storeu_ps(c + size_t(r) * ldc + 8 * x, acc[r][x]);
}

template <int NR>
inline void nn_rows(int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  int j = 0;
  for (; j + 32 <= n; j += 32) nn_tile<NR, 4>(k, a, lda, b + j, ldb, c + j, ldc);
  for (; j < n; j += 8) nn_tile<NR, 1>(k, a, lda, b + j, ldb, c + j, ldc);
}

// n a multiple of 8: tiles of 2 rows x 32 columns.
void gemm_nn_small(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  int i = 0;
  for (; i + 2 <= m; i += 2) nn_rows<2>(n, k, a + size_t(i) * lda, lda, b, ldb, c + size_t(i) * ldc, ldc);
  if (i < m) nn_rows<1>(n, k, a + size_t(i) * lda, lda, b, ldb, c + size_t(i) * ldc, ldc);
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
