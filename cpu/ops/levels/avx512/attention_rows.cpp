// The AVX-512 level's F16 attention row kernels (OpKernels::dot_f16, axpy_f16); its
// f32 ones are the AVX2 level's (tables.cpp).
#include "common/fp16.hpp"
#include "cpu/kernels/x86_intrinsics.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::avx512 {

float dot_f16(const float* q, const uint16_t* k, int n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i),
                         _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + i))), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16),
                         _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + i + 16))), a1);
  }
  float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  for (; i < n; ++i) s += q[i] * fp16_to_fp32(k[i]);
  return s;
}
void axpy_f16(float* acc, float w, const uint16_t* v, int n) {
  const __m512 wv = _mm512_set1_ps(w);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)));
    _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(wv, x, _mm512_loadu_ps(acc + i)));
  }
  for (; i < n; ++i) acc[i] += w * fp16_to_fp32(v[i]);
}

}  // namespace ember::cpu::avx512
