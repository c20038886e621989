// The NEON level's f32 GEMMs for the flash attention (OpKernels::gemm_nt, gemm_nn), for
// every ARM64 level: register tiles that read the operands where they lie (a handful of
// query rows against a tile of decoded key / value rows in L1/L2; no packing).
//
// gemm_nt (scores = alpha Q K^T): tiles of up to 4 query rows x 4 keys, one four-lane
// accumulator per pair (16 of NEON's 32 registers), over k four values at a time. The
// order, the same for every element whatever the tile it falls in (so a row's scores do
// not depend on m): lane l sums the terms t = l (mod 4) of t < k - k % 4 with FMAs, the
// lanes are added as (l0 + l1) + (l2 + l3) (FADDP), then the k % 4 remaining terms, one
// FMA each in index order, and the sum is multiplied by alpha. The scalar level sums in
// index order: the results differ by rounding only (tests/quant/test_op_kernels.cpp).
// gemm_nn (out = P V): tiles of up to 4 rows x 16 columns, each value row loaded once
// for the 4 rows; every element is the scalar level's sum, one FMA per term in index
// order starting from 0 (the scalar loop's order; GCC and Clang contract its
// multiply-add into that FMA on ARM64).
#include <arm_neon.h>

#include <cmath>

#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::neon {
namespace {

// The horizontal sum (l0 + l1) + (l2 + l3), as the FADDP tree of nt_tile.
inline float pair_sum(float32x4_t v) {
  const float32x2_t p = vpadd_f32(vget_low_f32(v), vget_high_f32(v));
  return vget_lane_f32(p, 0) + vget_lane_f32(p, 1);
}

// c[r][0..3] for R rows of A against the 4 rows of B at b (keys j .. j + 3).
template <int R>
inline void nt_tile(int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc, float alpha) {
  float32x4_t acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < 4; ++x) acc[r][x] = vdupq_n_f32(0.0f);
  const int k4 = k - k % 4;
  for (int t = 0; t < k4; t += 4) {
    float32x4_t bv[4];
    for (int x = 0; x < 4; ++x) bv[x] = vld1q_f32(b + size_t(x) * ldb + t);
    for (int r = 0; r < R; ++r) {
      const float32x4_t av = vld1q_f32(a + size_t(r) * lda + t);
      for (int x = 0; x < 4; ++x) acc[r][x] = vfmaq_f32(acc[r][x], av, bv[x]);
    }
  }
  for (int r = 0; r < R; ++r) {
    // Lane x: key x's (l0 + l1) + (l2 + l3).
    float32x4_t s = vpaddq_f32(vpaddq_f32(acc[r][0], acc[r][1]), vpaddq_f32(acc[r][2], acc[r][3]));
    const float* ar = a + size_t(r) * lda;
    for (int t = k4; t < k; ++t) {
      const float bt[4] = {b[t], b[size_t(ldb) + t], b[2 * size_t(ldb) + t], b[3 * size_t(ldb) + t]};
      s = vfmaq_n_f32(s, vld1q_f32(bt), ar[t]);
    }
    vst1q_f32(c + size_t(r) * ldc, vmulq_n_f32(s, alpha));
  }
}

// One element, in nt_tile's order.
inline float nt_one(int k, const float* a, const float* b, float alpha) {
  float32x4_t acc = vdupq_n_f32(0.0f);
  const int k4 = k - k % 4;
  for (int t = 0; t < k4; t += 4) acc = vfmaq_f32(acc, vld1q_f32(a + t), vld1q_f32(b + t));
  float s = pair_sum(acc);
  for (int t = k4; t < k; ++t) s = std::fma(a[t], b[t], s);
  return alpha * s;
}

// c[r][j0 .. j0 + 4 NC) for R rows of A.
template <int R, int NC>
inline void nn_tile(int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc, int j0) {
  float32x4_t acc[R][NC];
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NC; ++x) acc[r][x] = vdupq_n_f32(0.0f);
  for (int t = 0; t < k; ++t) {
    float32x4_t bv[NC];
    for (int x = 0; x < NC; ++x) bv[x] = vld1q_f32(b + size_t(t) * ldb + j0 + 4 * x);
    for (int r = 0; r < R; ++r) {
      const float w = a[size_t(r) * lda + t];
      for (int x = 0; x < NC; ++x) acc[r][x] = vfmaq_n_f32(acc[r][x], bv[x], w);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NC; ++x) vst1q_f32(c + size_t(r) * ldc + j0 + 4 * x, acc[r][x]);
}

// R rows of C, all n columns.
template <int R>
inline void nn_rows(int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  int j = 0;
  for (; j + 16 <= n; j += 16) nn_tile<R, 4>(k, a, lda, b, ldb, c, ldc, j);
  for (; j + 4 <= n; j += 4) nn_tile<R, 1>(k, a, lda, b, ldb, c, ldc, j);
  for (; j < n; ++j)
    for (int r = 0; r < R; ++r) {
      float s = 0.0f;
      for (int t = 0; t < k; ++t) s = std::fma(a[size_t(r) * lda + t], b[size_t(t) * ldb + j], s);
      c[size_t(r) * ldc + j] = s;
    }
}

}  // namespace

void gemm_nt(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc, float alpha) {
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* bj = b + size_t(j) * ldb;
    int i = 0;
    for (; i + 4 <= m; i += 4) nt_tile<4>(k, a + size_t(i) * lda, lda, bj, ldb, c + size_t(i) * ldc + j, ldc, alpha);
    const float* ai = a + size_t(i) * lda;
    float* ci = c + size_t(i) * ldc + j;
    switch (m - i) {
      case 3: nt_tile<3>(k, ai, lda, bj, ldb, ci, ldc, alpha); break;
      case 2: nt_tile<2>(k, ai, lda, bj, ldb, ci, ldc, alpha); break;
      case 1: nt_tile<1>(k, ai, lda, bj, ldb, ci, ldc, alpha); break;
      default: break;
    }
  }
  for (; j < n; ++j)
    for (int i = 0; i < m; ++i) c[size_t(i) * ldc + j] = nt_one(k, a + size_t(i) * lda, b + size_t(j) * ldb, alpha);
}

void gemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  int i = 0;
  for (; i + 4 <= m; i += 4) nn_rows<4>(n, k, a + size_t(i) * lda, lda, b, ldb, c + size_t(i) * ldc, ldc);
  const float* ai = a + size_t(i) * lda;
  float* ci = c + size_t(i) * ldc;
  switch (m - i) {
    case 3: nn_rows<3>(n, k, ai, lda, b, ldb, ci, ldc); break;
    case 2: nn_rows<2>(n, k, ai, lda, b, ldb, ci, ldc); break;
    case 1: nn_rows<1>(n, k, ai, lda, b, ldb, ci, ldc); break;
    default: break;
  }
}

}  // namespace ember::cpu::neon
