// The AVX2 level's F16/F32 attention row kernels (OpKernels::dot_f16 ... axpy_f32):
// F16C widens the F16 rows, FMA accumulates. The AVX-512 level uses the f32 ones too.
#include "common/fp16.hpp"
#include "cpu/kernels/x86_intrinsics.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::avx2 {
namespace {

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace

float dot_f16(const float* q, const uint16_t* k, int n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i),
                         _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + i))), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8),
                         _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + i + 8))), a1);
  }
  float s = hsum256(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += q[i] * fp16_to_fp32(k[i]);
  return s;
}
void axpy_f16(float* acc, float w, const uint16_t* v, int n) {
  const __m256 wv = _mm256_set1_ps(w);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i)));
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(wv, x, _mm256_loadu_ps(acc + i)));
  }
  for (; i < n; ++i) acc[i] += w * fp16_to_fp32(v[i]);
}
float dot_f32(const float* q, const float* k, int n) {
  __m256 a0 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
  float s = hsum256(a0);
  for (; i < n; ++i) s += q[i] * k[i];
  return s;
}
void axpy_f32(float* acc, float w, const float* v, int n) {
  const __m256 wv = _mm256_set1_ps(w);
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(acc + i)));
  for (; i < n; ++i) acc[i] += w * v[i];
}

// Each 16-value slice of a row is converted once for every head of the group; the
// updates are axpy_f16's (fmadd(w, v, acc) per element), in the same row order.
void pv_lanes_f16(const float* w, int ldw, int group, const uint16_t* const* rows, const int32_t* lane, int n,
                  int c0, int cols, int lanes, float* part) {
  const size_t head_stride = size_t(lanes) * size_t(cols);
  for (int j = 0; j < n; ++j) {
    const uint16_t* v = rows[j] + c0;
    float* base = part + size_t(lane[j]) * size_t(cols);
    for (int c = 0; c < cols; c += 16) {
      const __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + c)));
      const __m256 x1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + c + 8)));
      for (int g = 0; g < group; ++g) {
        const __m256 wv = _mm256_broadcast_ss(w + size_t(g) * size_t(ldw) + size_t(j));
        float* a = base + size_t(g) * head_stride + size_t(c);
        _mm256_storeu_ps(a, _mm256_fmadd_ps(wv, x0, _mm256_loadu_ps(a)));
        _mm256_storeu_ps(a + 8, _mm256_fmadd_ps(wv, x1, _mm256_loadu_ps(a + 8)));
      }
    }
  }
}

}  // namespace ember::cpu::avx2
