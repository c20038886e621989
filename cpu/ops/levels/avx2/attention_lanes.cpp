// The AVX2 level's lanes16 / lanes64 attention products (levels/lanes16.hpp): a 16-lane
// accumulator in two 256-bit registers, the same sums as Lanes16Scalar.
#include "cpu/kernels/x86_intrinsics.hpp"
#include "cpu/ops/levels/lanes16.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::avx2 {
namespace {

// Lanes 0-7 in lo, 8-15 in hi.
struct Lanes16Avx2 {
  __m256 lo, hi;
  static Lanes16Avx2 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Lanes16Avx2 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static Lanes16Avx2 load(const uint16_t* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  static Lanes16Avx2 fma(Lanes16Avx2 a, Lanes16Avx2 b, Lanes16Avx2 c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  static Lanes16Avx2 add(Lanes16Avx2 a, Lanes16Avx2 b) {
    return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)};
  }
  float sum() const {
    const __m256 t8 = _mm256_add_ps(lo, hi);
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_movehdup_ps(t));
    return _mm_cvtss_f32(t);
  }
};

}  // namespace

// flatten: the templates and the Lanes16 members are inlined into each entry.
__attribute__((flatten)) float dot64_f16(const float* q, const uint16_t* k, int n) {
  return dot_lanes64<Lanes16Avx2>(q, k, n);
}
__attribute__((flatten)) float dot64_f32(const float* q, const float* k, int n) {
  return dot_lanes64<Lanes16Avx2>(q, k, n);
}
__attribute__((flatten)) float dot16_f16(const float* q, const uint16_t* k, int n) {
  return dot_lanes16<Lanes16Avx2>(q, k, n);
}
__attribute__((flatten)) float dot16_f32(const float* q, const float* k, int n) {
  return dot_lanes16<Lanes16Avx2>(q, k, n);
}
// 2 x 3 tiles: 12 accumulator registers of AVX2's 16.
__attribute__((flatten)) void gemm16(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
                                     int ldc) {
  gemm_lanes16<Lanes16Avx2, 2, 3>(m, n, k, a, lda, b, ldb, c, ldc);
}

}  // namespace ember::cpu::avx2
