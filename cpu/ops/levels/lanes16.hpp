// llama.cpp's summation orders for the F16/F32 attention products, written once over a
// 16-lane accumulator type L that each level implements with its registers.
//
// ember's F16-cache attention adds its products in exactly the order llama.cpp's
// CPU backend does (flash attention off, ggml_mul_mat on F16 operands), so that
// the two agree bit for bit (docs/model.md, "Numerics"). Two orders occur:
//  - "lanes16" (llama.cpp multiplies with its tinyBLAS GEMM: a batch of >= 2
//    tokens): element i of a dot product goes to lane i % 16, each lane is a
//    sequential FMA chain, and the 16 lanes are added as a tree: (l, l+8), then
//    (l, l+4), (l, l+2), (l, l+1) — _mm512_reduce_add_ps.
//  - "lanes64" (ggml_vec_dot_f16: a batch of one token): the first n & ~63
//    elements go to lane i % 64 (4 vectors of 16), the vectors are added
//    (v0+v2) + (v1+v3) and then as lanes16; the remaining elements are added one
//    by one in double after that.
// L provides zero(), load(const float*), load(const uint16_t*) (F16), fma(a, b, c)
// (c + a * b per lane, fused), add(a, b) and sum() (the tree above); Lanes16Scalar is
// the definition, the levels' types (levels/<level>/attention_lanes.cpp) give the same bits.
//
// Internal linkage: this header is compiled with several levels' flags.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/fp16.hpp"

namespace ember::cpu {
namespace {

struct Lanes16Scalar {
  float v[16];
  static Lanes16Scalar zero() { return {}; }
  static Lanes16Scalar load(const float* p) {
    Lanes16Scalar r;
    for (int l = 0; l < 16; ++l) r.v[l] = p[l];
    return r;
  }
  static Lanes16Scalar load(const uint16_t* p) {
    Lanes16Scalar r;
    for (int l = 0; l < 16; ++l) r.v[l] = fp16_to_fp32(p[l]);
    return r;
  }
  static Lanes16Scalar fma(Lanes16Scalar a, Lanes16Scalar b, Lanes16Scalar c) {
    for (int l = 0; l < 16; ++l) c.v[l] = std::fma(a.v[l], b.v[l], c.v[l]);
    return c;
  }
  static Lanes16Scalar add(Lanes16Scalar a, Lanes16Scalar b) {
    for (int l = 0; l < 16; ++l) a.v[l] += b.v[l];
    return a;
  }
  float sum() const {
    float t[8];
    for (int l = 0; l < 8; ++l) t[l] = v[l] + v[l + 8];
    for (int l = 0; l < 4; ++l) t[l] += t[l + 4];
    for (int l = 0; l < 2; ++l) t[l] += t[l + 2];
    return t[0] + t[1];
  }
};

inline float to_float(float x) { return x; }
inline float to_float(uint16_t h) { return fp16_to_fp32(h); }

// The lanes64 dot product of q (f32) and k (F16 or f32 row), n elements.
template <class L, class K>
float dot_lanes64(const float* q, const K* k, int n) {
  const int np = n & ~63;
  L acc[4] = {L::zero(), L::zero(), L::zero(), L::zero()};
  for (int i = 0; i < np; i += 64)
    for (int a = 0; a < 4; ++a) acc[a] = L::fma(L::load(k + i + 16 * a), L::load(q + i + 16 * a), acc[a]);
  double total = L::add(L::add(acc[0], acc[2]), L::add(acc[1], acc[3])).sum();
  for (int i = np; i < n; ++i) total += double(q[i] * to_float(k[i]));
  return float(total);
}

// The lanes16 dot product; n is a multiple of 16.
template <class L, class K>
float dot_lanes16(const float* q, const K* k, int n) {
  L acc = L::zero();
  for (int i = 0; i < n; i += 16) acc = L::fma(L::load(k + i), L::load(q + i), acc);
  return acc.sum();
}

// C[i][j] = lanes16 dot of A row i and B row j (k a multiple of 16), for an RM x RN tile.
template <class L, int RM, int RN>
void tile_lanes16(const float* a, int lda, const float* b, int ldb, float* c, int ldc, int k) {
  L acc[RM][RN];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc[i][j] = L::zero();
  for (int l = 0; l < k; l += 16) {
    L bv[RN];
    for (int j = 0; j < RN; ++j) bv[j] = L::load(b + size_t(j) * ldb + l);
    for (int i = 0; i < RM; ++i) {
      const L av = L::load(a + size_t(i) * lda + l);
      for (int j = 0; j < RN; ++j) acc[i][j] = L::fma(bv[j], av, acc[i][j]);
    }
  }
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) c[size_t(i) * ldc + j] = acc[i][j].sum();
}

// C[m][n] = lanes16 dot products of the rows of A [m][k] and B [n][k]: what
// llama.cpp's tinyBLAS computes for each element, tiled for registers.
template <class L, int RM, int RN>
void gemm_lanes16(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  int i = 0;
  for (; i + RM <= m; i += RM) {
    int j = 0;
    for (; j + RN <= n; j += RN)
      tile_lanes16<L, RM, RN>(a + size_t(i) * lda, lda, b + size_t(j) * ldb, ldb, c + size_t(i) * ldc + j, ldc, k);
    for (; j < n; ++j)
      tile_lanes16<L, RM, 1>(a + size_t(i) * lda, lda, b + size_t(j) * ldb, ldb, c + size_t(i) * ldc + j, ldc, k);
  }
  for (; i < m; ++i)
    for (int j = 0; j < n; ++j)
      tile_lanes16<L, 1, 1>(a + size_t(i) * lda, lda, b + size_t(j) * ldb, ldb, c + size_t(i) * ldc + j, ldc, k);
}

}  // namespace
}  // namespace ember::cpu
