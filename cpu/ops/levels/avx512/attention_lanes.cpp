// The AVX-512 level's lanes16 / lanes64 attention products (levels/lanes16.hpp): one
// 512-bit register per 16-lane accumulator, whose reduce_add is the lanes16 tree.
#include "cpu/kernels/x86_intrinsics.hpp"
#include "cpu/ops/levels/lanes16.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::avx512 {
namespace {

struct Lanes16Avx512 {
  __m512 v;
  static Lanes16Avx512 zero() { return {_mm512_setzero_ps()}; }
  static Lanes16Avx512 load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static Lanes16Avx512 load(const uint16_t* p) {
    return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
  }
  static Lanes16Avx512 fma(Lanes16Avx512 a, Lanes16Avx512 b, Lanes16Avx512 c) {
    return {_mm512_fmadd_ps(a.v, b.v, c.v)};
  }
  static Lanes16Avx512 add(Lanes16Avx512 a, Lanes16Avx512 b) { return {_mm512_add_ps(a.v, b.v)}; }
  float sum() const { return _mm512_reduce_add_ps(v); }
};

}  // namespace

// flatten: the templates and the Lanes16 members are inlined into each entry.
__attribute__((flatten)) float dot64_f16(const float* q, const uint16_t* k, int n) {
  return dot_lanes64<Lanes16Avx512>(q, k, n);
}
__attribute__((flatten)) float dot64_f32(const float* q, const float* k, int n) {
  return dot_lanes64<Lanes16Avx512>(q, k, n);
}
__attribute__((flatten)) float dot16_f16(const float* q, const uint16_t* k, int n) {
  return dot_lanes16<Lanes16Avx512>(q, k, n);
}
__attribute__((flatten)) float dot16_f32(const float* q, const float* k, int n) {
  return dot_lanes16<Lanes16Avx512>(q, k, n);
}
// 4 x 4 tiles: 16 accumulator registers of AVX-512's 32.
__attribute__((flatten)) void gemm16(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c,
                                     int ldc) {
  gemm_lanes16<Lanes16Avx512, 4, 4>(m, n, k, a, lda, b, ldb, c, ldc);
}

}  // namespace ember::cpu::avx512
