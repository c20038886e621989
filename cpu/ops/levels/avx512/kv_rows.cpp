// The AVX-512 level's quantized KV-cache row kernels (OpKernels::kv_rows), compiled with
// the level's flags (cpu/CMakeLists.txt). `n` is always a whole number of groups, hence
// a multiple of 32, so the vector loops (16 values per vector) need no tails. INT4 dot products use
// d * sum(q * c) + m * sum(q) per group (one FMA and one add per vector instead of
// decoding each value); decode_stored multiplies then adds, exactly as the reference
// decoder (cpu/ops/kv_rows.hpp).
#include "cpu/kernels/x86_intrinsics.hpp"
#include "cpu/ops/levels/kv_rows_common.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::avx512 {
namespace {

inline float half_f16c(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
// 16 int8 codes at `c` as floats.
inline __m512 i8x16(const uint8_t* c) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c))));
}
inline __m512 u8x16(__m128i bytes) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes)); }

struct Kernels {
  template <int G>
  static float dot_q8(const float* q, const void* row, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    __m512 total = _mm512_setzero_ps();
    for (int g = 0; g < n / G; ++g, b += G + 2, q += G) {
      __m512 s = _mm512_mul_ps(_mm512_loadu_ps(q), i8x16(b + 2));
      for (int j = 16; j < G; j += 16) s = _mm512_fmadd_ps(_mm512_loadu_ps(q + j), i8x16(b + 2 + j), s);
      total = _mm512_fmadd_ps(_mm512_set1_ps(half_f16c(b)), s, total);
    }
    return _mm512_reduce_add_ps(total);
  }
  template <int G>
  static void axpy_q8(float* acc, float w, const void* row, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int g = 0; g < n / G; ++g, b += G + 2, acc += G) {
      const __m512 wd = _mm512_set1_ps(w * half_f16c(b));
      for (int j = 0; j < G; j += 16)
        _mm512_storeu_ps(acc + j, _mm512_fmadd_ps(wd, i8x16(b + 2 + j), _mm512_loadu_ps(acc + j)));
    }
  }
  template <int G>
  static void decode_q8(const void* row, float* out, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    for (int g = 0; g < n / G; ++g, b += G + 2, out += G) {
      const __m512 d = _mm512_set1_ps(half_f16c(b));
      for (int j = 0; j < G; j += 16) _mm512_storeu_ps(out + j, _mm512_mul_ps(d, i8x16(b + 2 + j)));
    }
  }
  template <int G>
  static float dot_q4(const float* q, const void* row, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    const __m128i mask = _mm_set1_epi8(15);
    __m512 total = _mm512_setzero_ps();
    for (int g = 0; g < n / G; ++g, b += G / 2 + 4, q += G) {
      __m512 sc = _mm512_setzero_ps(), sq = _mm512_setzero_ps();
      for (int k = 0; k < G / 2; k += 16) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4 + k));
        const __m128i lo = _mm_and_si128(bytes, mask), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
        const __m512 q0 = _mm512_loadu_ps(q + k), q1 = _mm512_loadu_ps(q + G / 2 + k);
        sc = _mm512_fmadd_ps(q0, u8x16(lo), sc);
        sc = _mm512_fmadd_ps(q1, u8x16(hi), sc);
        sq = _mm512_add_ps(sq, _mm512_add_ps(q0, q1));
      }
      total = _mm512_fmadd_ps(_mm512_set1_ps(half_f16c(b)), sc, total);
      total = _mm512_fmadd_ps(_mm512_set1_ps(half_f16c(b + 2)), sq, total);
    }
    return _mm512_reduce_add_ps(total);
  }
  template <int G>
  static void axpy_q4(float* acc, float w, const void* row, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    const __m128i mask = _mm_set1_epi8(15);
    for (int g = 0; g < n / G; ++g, b += G / 2 + 4, acc += G) {
      const __m512 wd = _mm512_set1_ps(w * half_f16c(b)), wm = _mm512_set1_ps(w * half_f16c(b + 2));
      for (int k = 0; k < G / 2; k += 16) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4 + k));
        const __m128i lo = _mm_and_si128(bytes, mask), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
        float* al = acc + k;
        float* ah = acc + G / 2 + k;
        _mm512_storeu_ps(al, _mm512_fmadd_ps(wd, u8x16(lo), _mm512_add_ps(_mm512_loadu_ps(al), wm)));
        _mm512_storeu_ps(ah, _mm512_fmadd_ps(wd, u8x16(hi), _mm512_add_ps(_mm512_loadu_ps(ah), wm)));
      }
    }
  }
  template <int G>
  static void decode_q4(const void* row, float* out, int n) {
    const auto* b = static_cast<const uint8_t*>(row);
    const __m128i mask = _mm_set1_epi8(15);
    for (int g = 0; g < n / G; ++g, b += G / 2 + 4, out += G) {
      const __m512 d = _mm512_set1_ps(half_f16c(b)), m = _mm512_set1_ps(half_f16c(b + 2));
      for (int k = 0; k < G / 2; k += 16) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4 + k));
        const __m128i lo = _mm_and_si128(bytes, mask), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
        _mm512_storeu_ps(out + k, _mm512_add_ps(_mm512_mul_ps(d, u8x16(lo)), m));
        _mm512_storeu_ps(out + G / 2 + k, _mm512_add_ps(_mm512_mul_ps(d, u8x16(hi)), m));
      }
    }
  }
  static float dot_f32(const float* q, const float* x, int n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 32) {
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(x + i), a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), _mm512_loadu_ps(x + i + 16), a1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  }
  static void axpy_f32(float* acc, float w, const float* x, int n) {
    const __m512 wv = _mm512_set1_ps(w);
    for (int i = 0; i < n; i += 16)
      _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + i), _mm512_loadu_ps(acc + i)));
  }
};

}  // namespace

const KvRowKernels* kv_rows(quant::DType type) { return KvRowTables<Kernels>::of(type); }

}  // namespace ember::cpu::avx512
