// The AVX2 level's quantized KV-cache row kernels (OpKernels::kv_rows), compiled with
// the level's flags (cpu/CMakeLists.txt). `n` is always a whole number of groups, hence
// a multiple of 32, so the vector loops need no tails. INT4 dot products use
// d * sum(q * c) + m * sum(q) per group (one FMA and one add per vector instead of
// decoding each value); decode_stored multiplies then adds, exactly as the reference
// decoder (cpu/ops/kv_rows.hpp).
#include "cpu/kernels/x86_intrinsics.hpp"
#include "cpu/ops/levels/avx2/codes.hpp"
#include "cpu/ops/levels/kv_rows_common.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::avx2 {
namespace {

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// The low 8 bytes of `bytes` (values 0..15) as floats.
inline __m256 u8x8(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)); }

struct Kernels {
  template <int G>
  static float dot_q8(const float* q, const void* row, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    __m256 total = _mm256_setzero_ps();
    for (int g = 0; g < n / G; ++g, b += G + 2, q += G) {
      __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
      for (int j = 0; j < G; j += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + j), i8x8(b + 2 + j), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + j + 8), i8x8(b + 2 + j + 8), s1);
      }
      total = _mm256_fmadd_ps(_mm256_set1_ps(half_f16c(b)), _mm256_add_ps(s0, s1), total);
    }
    return hsum256(total);
  }
  template <int G>
  static void axpy_q8(float* acc, float w, const void* row, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int g = 0; g < n / G; ++g, b += G + 2, acc += G) {
      const __m256 wd = _mm256_set1_ps(w * half_f16c(b));
      for (int j = 0; j < G; j += 8)
        _mm256_storeu_ps(acc + j, _mm256_fmadd_ps(wd, i8x8(b + 2 + j), _mm256_loadu_ps(acc + j)));
    }
  }
  template <int G>
  static void decode_q8(const void* row, float* out, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int g = 0; g < n / G; ++g, b += G + 2, out += G) {
      const __m256 d = _mm256_set1_ps(half_f16c(b));
      for (int j = 0; j < G; j += 8) _mm256_storeu_ps(out + j, _mm256_mul_ps(d, i8x8(b + 2 + j)));
    }
  }
  template <int G>
  static float dot_q4(const float* q, const void* row, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    const __m128i mask = _mm_set1_epi8(15);
    __m256 total = _mm256_setzero_ps();
    for (int g = 0; g < n / G; ++g, b += G / 2 + 4, q += G) {
      __m256 sc = _mm256_setzero_ps(), sq = _mm256_setzero_ps();
      for (int k = 0; k < G / 2; k += 16) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4 + k));
        const __m128i lo = _mm_and_si128(bytes, mask), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
        const float* ql = q + k;
        const float* qh = q + G / 2 + k;
        const __m256 q0 = _mm256_loadu_ps(ql), q1 = _mm256_loadu_ps(ql + 8);
        const __m256 q2 = _mm256_loadu_ps(qh), q3 = _mm256_loadu_ps(qh + 8);
        sc = _mm256_fmadd_ps(q0, u8x8(lo), sc);
        sc = _mm256_fmadd_ps(q1, u8x8(_mm_srli_si128(lo, 8)), sc);
        sc = _mm256_fmadd_ps(q2, u8x8(hi), sc);
        sc = _mm256_fmadd_ps(q3, u8x8(_mm_srli_si128(hi, 8)), sc);
        sq = _mm256_add_ps(sq, _mm256_add_ps(_mm256_add_ps(q0, q1), _mm256_add_ps(q2, q3)));
      }
      total = _mm256_fmadd_ps(_mm256_set1_ps(half_f16c(b)), sc, total);
      total = _mm256_fmadd_ps(_mm256_set1_ps(half_f16c(b + 2)), sq, total);
    }
    return hsum256(total);
  }
  template <int G>
  static void axpy_q4(float* acc, float w, const void* row, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    const __m128i mask = _mm_set1_epi8(15);
    for (int g = 0; g < n / G; ++g, b += G / 2 + 4, acc += G) {
      const __m256 wd = _mm256_set1_ps(w * half_f16c(b)), wm = _mm256_set1_ps(w * half_f16c(b + 2));
      for (int k = 0; k < G / 2; k += 16) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4 + k));
        const __m128i lo = _mm_and_si128(bytes, mask), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
        float* al = acc + k;
        float* ah = acc + G / 2 + k;
        _mm256_storeu_ps(al, _mm256_fmadd_ps(wd, u8x8(lo), _mm256_add_ps(_mm256_loadu_ps(al), wm)));
        _mm256_storeu_ps(al + 8,
                         _mm256_fmadd_ps(wd, u8x8(_mm_srli_si128(lo, 8)), _mm256_add_ps(_mm256_loadu_ps(al + 8), wm)));
        _mm256_storeu_ps(ah, _mm256_fmadd_ps(wd, u8x8(hi), _mm256_add_ps(_mm256_loadu_ps(ah), wm)));
        _mm256_storeu_ps(ah + 8,
                         _mm256_fmadd_ps(wd, u8x8(_mm_srli_si128(hi, 8)), _mm256_add_ps(_mm256_loadu_ps(ah + 8), wm)));
      }
    }
  }
  template <int G>
  static void decode_q4(const void* row, float* out, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    const __m128i mask = _mm_set1_epi8(15);
    for (int g = 0; g < n / G; ++g, b += G / 2 + 4, out += G) {
      const __m256 d = _mm256_set1_ps(half_f16c(b)), m = _mm256_set1_ps(half_f16c(b + 2));
      for (int k = 0; k < G / 2; k += 16) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4 + k));
        const __m128i lo = _mm_and_si128(bytes, mask), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
        float* ol = out + k;
        float* oh = out + G / 2 + k;
        _mm256_storeu_ps(ol, _mm256_add_ps(_mm256_mul_ps(d, u8x8(lo)), m));
        _mm256_storeu_ps(ol + 8, _mm256_add_ps(_mm256_mul_ps(d, u8x8(_mm_srli_si128(lo, 8))), m));
        _mm256_storeu_ps(oh, _mm256_add_ps(_mm256_mul_ps(d, u8x8(hi)), m));
        _mm256_storeu_ps(oh + 8, _mm256_add_ps(_mm256_mul_ps(d, u8x8(_mm_srli_si128(hi, 8))), m));
      }
    }
  }
  static float dot_f32(const float* q, const float* x, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 32) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(x + i), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(x + i + 8), a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 16), _mm256_loadu_ps(x + i + 16), a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    return hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  }
  static void axpy_f32(float* acc, float w, const float* x, int n) {
    const __m256 wv = _mm256_set1_ps(w);
    for (int i = 0; i < n; i += 8)
      _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(acc + i)));
  }
};

}  // namespace

const KvRowKernels* kv_rows(quant::DType type) { return KvRowTables<Kernels>::of(type); }

}  // namespace ember::cpu::avx2
