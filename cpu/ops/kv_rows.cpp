// Scalar, AVX2 and AVX-512 row kernels over the quantized KV formats
// (quant/kv_formats.hpp). `n` is always a whole number of groups, hence a multiple of
// 32, so the vector loops need no tails.
//
// INT4 kernels work on the stored values y = d * c + m (before the format's rotation, see
// kv_rows.hpp). Dot products use d * sum(q * c) + m * sum(q) per group (one FMA and one
// add per vector instead of decoding each value); decode_stored() multiplies then adds,
// exactly as the reference decoder, and decode() then applies the reference inverse
// rotation (quant::kv::unrotate_groups), so decoded rows equal quant::dequantize_row bit for bit.
#include "cpu/ops/kv_rows.hpp"

#include <cstring>

#include "common/fail.hpp"
#include "common/fp16.hpp"
#include "cpu/kernels/x86_intrinsics.hpp"
#include "quant/kv_formats.hpp"


namespace ember::cpu {
namespace {

inline float load_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

// ---- scalar: the reference arithmetic, group by group ----

template <int G>
float dot_q8_scalar(const float* q, const void* row, int n) {
  const auto* b = static_cast<const uint8_t*>(row);
  float total = 0.0f;
  for (int g = 0; g < n / G; ++g, b += G + 2, q += G) {
    const auto* c = reinterpret_cast<const int8_t*>(b + 2);
    float s = 0.0f;
    for (int j = 0; j < G; ++j) s += q[j] * float(c[j]);
    total += load_half(b) * s;
  }
  return total;
}
template <int G>
void axpy_q8_scalar(float* acc, float w, const void* row, int n) {
  const auto* b = static_cast<const uint8_t*>(row);
  for (int g = 0; g < n / G; ++g, b += G + 2, acc += G) {
    const auto* c = reinterpret_cast<const int8_t*>(b + 2);
    const float wd = w * load_half(b);
    for (int j = 0; j < G; ++j) acc[j] += wd * float(c[j]);
  }
}
template <int G>
void decode_q8_scalar(const void* row, float* out, int n) {
  quant::kv::dequantize_q8(row, out, n, G);
}
template <int G>
float dot_q4_scalar(const float* q, const void* row, int n) {
  const auto* b = static_cast<const uint8_t*>(row);
  float total = 0.0f;
  for (int g = 0; g < n / G; ++g, b += G / 2 + 4, q += G) {
    float sc = 0.0f, sq = 0.0f;
    for (int j = 0; j < G / 2; ++j) {
      sc += q[j] * float(b[4 + j] & 15) + q[j + G / 2] * float(b[4 + j] >> 4);
      sq += q[j] + q[j + G / 2];
    }
    total += load_half(b) * sc + load_half(b + 2) * sq;
  }
  return total;
}
template <int G>
void axpy_q4_scalar(float* acc, float w, const void* row, int n) {
  const auto* b = static_cast<const uint8_t*>(row);
  for (int g = 0; g < n / G; ++g, b += G / 2 + 4, acc += G) {
    const float wd = w * load_half(b), wm = w * load_half(b + 2);
    for (int j = 0; j < G / 2; ++j) {
      acc[j] += wd * float(b[4 + j] & 15) + wm;
      acc[j + G / 2] += wd * float(b[4 + j] >> 4) + wm;
    }
  }
}
template <int G>
void decode_q4_scalar(const void* row, float* out, int n) {
  quant::kv::decode_q4_stored(row, out, n, G);
}
float dot_f32_scalar(const float* q, const float* x, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += q[i] * x[i];
  return s;
}
void axpy_f32_scalar(float* acc, float w, const float* x, int n) {
  for (int i = 0; i < n; ++i) acc[i] += w * x[i];
}

#if defined(EMBER_X86)

#define EMBER_AVX2 __attribute__((target("avx2,fma,f16c")))
#define EMBER_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

EMBER_AVX2 inline float half_f16c(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
EMBER_AVX2 inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// 8 int8 codes at `c` as floats.
EMBER_AVX2 inline __m256 i8x8(const uint8_t* c) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c))));
}
// The low 8 bytes of `bytes` (values 0..15) as floats.
EMBER_AVX2 inline __m256 u8x8(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)); }

// ---- AVX2 ----

template <int G>
EMBER_AVX2 float dot_q8_avx2(const float* q, const void* row, int n) {
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
EMBER_AVX2 void axpy_q8_avx2(float* acc, float w, const void* row, int n) {
  const auto* b = static_cast<const uint8_t*>(row);
  for (int g = 0; g < n / G; ++g, b += G + 2, acc += G) {
    const __m256 wd = _mm256_set1_ps(w * half_f16c(b));
    for (int j = 0; j < G; j += 8)
      _mm256_storeu_ps(acc + j, _mm256_fmadd_ps(wd, i8x8(b + 2 + j), _mm256_loadu_ps(acc + j)));
  }
}
template <int G>
EMBER_AVX2 void decode_q8_avx2(const void* row, float* out, int n) {
  const auto* b = static_cast<const uint8_t*>(row);
  for (int g = 0; g < n / G; ++g, b += G + 2, out += G) {
    const __m256 d = _mm256_set1_ps(half_f16c(b));
    for (int j = 0; j < G; j += 8) _mm256_storeu_ps(out + j, _mm256_mul_ps(d, i8x8(b + 2 + j)));
  }
}
template <int G>
EMBER_AVX2 float dot_q4_avx2(const float* q, const void* row, int n) {
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
EMBER_AVX2 void axpy_q4_avx2(float* acc, float w, const void* row, int n) {
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
EMBER_AVX2 void decode_q4_avx2(const void* row, float* out, int n) {
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
EMBER_AVX2 float dot_f32_avx2(const float* q, const float* x, int n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  return hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}
EMBER_AVX2 void axpy_f32_avx2(float* acc, float w, const float* x, int n) {
  const __m256 wv = _mm256_set1_ps(w);
  for (int i = 0; i < n; i += 8)
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(acc + i)));
}

// ---- AVX-512: 16 values per vector ----

// 16 int8 codes at `c` as floats.
EMBER_AVX512 inline __m512 i8x16(const uint8_t* c) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c))));
}
EMBER_AVX512 inline __m512 u8x16(__m128i bytes) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes)); }

template <int G>
EMBER_AVX512 float dot_q8_avx512(const float* q, const void* row, int n) {
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
EMBER_AVX512 void axpy_q8_avx512(float* acc, float w, const void* row, int n) {
  const auto* b = static_cast<const uint8_t*>(row);
  for (int g = 0; g < n / G; ++g, b += G + 2, acc += G) {
    const __m512 wd = _mm512_set1_ps(w * half_f16c(b));
    for (int j = 0; j < G; j += 16)
      _mm512_storeu_ps(acc + j, _mm512_fmadd_ps(wd, i8x16(b + 2 + j), _mm512_loadu_ps(acc + j)));
  }
}
template <int G>
EMBER_AVX512 void decode_q8_avx512(const void* row, float* out, int n) {
  const auto* b = static_cast<const uint8_t*>(row);
  for (int g = 0; g < n / G; ++g, b += G + 2, out += G) {
    const __m512 d = _mm512_set1_ps(half_f16c(b));
    for (int j = 0; j < G; j += 16) _mm512_storeu_ps(out + j, _mm512_mul_ps(d, i8x16(b + 2 + j)));
  }
}
template <int G>
EMBER_AVX512 float dot_q4_avx512(const float* q, const void* row, int n) {
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
EMBER_AVX512 void axpy_q4_avx512(float* acc, float w, const void* row, int n) {
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
EMBER_AVX512 void decode_q4_avx512(const void* row, float* out, int n) {
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
EMBER_AVX512 float dot_f32_avx512(const float* q, const float* x, int n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(x + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), _mm512_loadu_ps(x + i + 16), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}
EMBER_AVX512 void axpy_f32_avx512(float* acc, float w, const float* x, int n) {
  const __m512 wv = _mm512_set1_ps(w);
  for (int i = 0; i < n; i += 16)
    _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + i), _mm512_loadu_ps(acc + i)));
}

#undef EMBER_AVX2
#undef EMBER_AVX512

#endif  // EMBER_X86

void rotate_none(float*, int64_t) {}
template <int G>
void rotate_q4(float* v, int64_t n) {
  quant::kv::rotate_groups(v, n, G);
}
template <int G>
void unrotate_q4(float* v, int64_t n) {
  quant::kv::unrotate_groups(v, n, G);
}
// decode() of INT4: the stored values, then the reference inverse rotation.
template <void (*Stored)(const void*, float*, int), int G>
void decode_q4_rotated(const void* row, float* out, int n) {
  Stored(row, out, n);
  quant::kv::unrotate_groups(out, n, G);
}

template <int G>
KvRowKernels q8_kernels(Isa isa) {
#if defined(EMBER_X86)
  if (isa == Isa::avx512)
    return {dot_q8_avx512<G>, axpy_q8_avx512<G>, decode_q8_avx512<G>, decode_q8_avx512<G>,
            rotate_none, rotate_none,      dot_f32_avx512,    axpy_f32_avx512};
  if (op_level(isa) == Isa::avx2)
    return {dot_q8_avx2<G>, axpy_q8_avx2<G>, decode_q8_avx2<G>, decode_q8_avx2<G>,
            rotate_none, rotate_none,    dot_f32_avx2,    axpy_f32_avx2};
#endif
  return {dot_q8_scalar<G>, axpy_q8_scalar<G>, decode_q8_scalar<G>, decode_q8_scalar<G>,
          rotate_none, rotate_none,      dot_f32_scalar,    axpy_f32_scalar};
}
template <int G>
KvRowKernels q4_kernels(Isa isa) {
#if defined(EMBER_X86)
  if (isa == Isa::avx512)
    return {dot_q4_avx512<G>, axpy_q4_avx512<G>, decode_q4_avx512<G>, decode_q4_rotated<decode_q4_avx512<G>, G>,
            rotate_q4<G>, unrotate_q4<G>,     dot_f32_avx512,    axpy_f32_avx512};
  if (op_level(isa) == Isa::avx2)
    return {dot_q4_avx2<G>, axpy_q4_avx2<G>, decode_q4_avx2<G>, decode_q4_rotated<decode_q4_avx2<G>, G>,
            rotate_q4<G>, unrotate_q4<G>,   dot_f32_avx2,    axpy_f32_avx2};
#endif
  return {dot_q4_scalar<G>, axpy_q4_scalar<G>, decode_q4_scalar<G>, decode_q4_rotated<decode_q4_scalar<G>, G>,
          rotate_q4<G>, unrotate_q4<G>,     dot_f32_scalar,    axpy_f32_scalar};
}

}  // namespace

KvRowKernels kv_row_kernels(Isa isa, quant::DType type) {
  switch (type) {
    case quant::DType::kv_q8_g32:
      return q8_kernels<32>(isa);
    case quant::DType::kv_q8_g64:
      return q8_kernels<64>(isa);
    case quant::DType::kv_q4_g32:
      return q4_kernels<32>(isa);
    case quant::DType::kv_q4_g64:
      return q4_kernels<64>(isa);
    default:
      fail(ErrorCode::unsupported, "kv_row_kernels: {} is not a quantized KV type", quant::type_name(type));
  }
}

}  // namespace ember::cpu
