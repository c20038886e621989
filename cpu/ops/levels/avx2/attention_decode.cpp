// The AVX2 level's fused decode-attention kernels over F16 cache rows
// (OpKernels::scores_f16, pv_f16), the 8-lane form of avx512/attention_decode.cpp:
// scores 8 keys at a time (the keys converted once into an 8 x head_dim f32 block on
// the stack, one FMA accumulator per key, the 8 accumulators reduced to the vector of
// their 8 sums by horizontal adds); P.V in 16-column slices for up to 4 query heads.
// head_dim must be a multiple of 16 (the caller checks).
#include <algorithm>

#include "cpu/kernels/x86_intrinsics.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::avx2 {
namespace {

constexpr int kMaxHeadDim = 512;
constexpr int kPvRows = 32;

inline __m256 f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Lane j = the sum of acc[j]'s 8 lanes.
inline __m256 reduce8(const __m256* acc) {
  const __m256 h01 = _mm256_hadd_ps(acc[0], acc[1]), h23 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 h45 = _mm256_hadd_ps(acc[4], acc[5]), h67 = _mm256_hadd_ps(acc[6], acc[7]);
  const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20), _mm256_permute2f128_ps(h0123, h4567, 0x31));
}

template <int G, int NX>
inline void pv_slice(const float* p, int ldp, int hd, const uint16_t* const* rows, int n, float* acc, int c0) {
  __m256 a[G][NX];
  for (int g = 0; g < G; ++g)
    for (int x = 0; x < NX; ++x) a[g][x] = _mm256_loadu_ps(acc + g * hd + c0 + 8 * x);
  for (int j = 0; j < n; ++j) {
    __m256 v[NX];
    for (int x = 0; x < NX; ++x) v[x] = f16x8(rows[j] + c0 + 8 * x);
    for (int g = 0; g < G; ++g) {
      const __m256 w = _mm256_broadcast_ss(p + g * ldp + j);
      for (int x = 0; x < NX; ++x) a[g][x] = _mm256_fmadd_ps(w, v[x], a[g][x]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int x = 0; x < NX; ++x) _mm256_storeu_ps(acc + g * hd + c0 + 8 * x, a[g][x]);
}

template <int G>
inline void pv_heads(const float* p, int ldp, int hd, const uint16_t* const* rows, int n, float* acc) {
  for (int c0 = 0; c0 < hd; c0 += 16) pv_slice<G, 2>(p, ldp, hd, rows, n, acc, c0);
}

}  // namespace

void scores_f16(const float* q, int group, int hd, const uint16_t* const* rows, int n, float scale, float* s,
                int lds) {
  alignas(32) float keys[8 * kMaxHeadDim];
  const __m256 scale_v = _mm256_set1_ps(scale);
  for (int j0 = 0; j0 < n; j0 += 8) {
    const int jn = std::min(8, n - j0);
    for (int j = 0; j < 8; ++j) {
      float* dst = keys + j * hd;
      if (j < jn) {
        for (int d = 0; d < hd; d += 8) _mm256_store_ps(dst + d, f16x8(rows[j0 + j] + d));
      } else {
        for (int d = 0; d < hd; d += 8) _mm256_store_ps(dst + d, _mm256_setzero_ps());
      }
    }
    for (int g = 0; g < group; ++g) {
      const float* qg = q + g * hd;
      __m256 acc[8];
      for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
      for (int d = 0; d < hd; d += 8) {
        const __m256 qv = _mm256_loadu_ps(qg + d);
        for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qv, _mm256_load_ps(keys + j * hd + d), acc[j]);
      }
      alignas(32) float out[8];
      _mm256_store_ps(out, _mm256_mul_ps(scale_v, reduce8(acc)));
      std::copy(out, out + jn, s + g * lds + j0);
    }
  }
}

void pv_f16(const float* p, int ldp, int group, int hd, const uint16_t* const* rows, int n, float* acc) {
  for (int j0 = 0; j0 < n; j0 += kPvRows) {
    const int jn = std::min(kPvRows, n - j0);
    int g = 0;
    for (; g + 4 <= group; g += 4) pv_heads<4>(p + g * ldp + j0, ldp, hd, rows + j0, jn, acc + g * hd);
    for (; g + 2 <= group; g += 2) pv_heads<2>(p + g * ldp + j0, ldp, hd, rows + j0, jn, acc + g * hd);
    for (; g < group; ++g) pv_heads<1>(p + g * ldp + j0, ldp, hd, rows + j0, jn, acc + g * hd);
  }
}

}  // namespace ember::cpu::avx2
