// AVX-512 activation quantizers: Q8_0, Q8_1 and Q8_K, all rounding half to even.
// Same arithmetic as lib/quant/q8_0.cpp, q8_1.cpp, q8_k.cpp, so the codes are identical.
#include "cpu/kernels/avx512/simd.hpp"

namespace ember::cpu::avx512 {
namespace {

// Codes and scale of one 32-value block; returns the unrounded d.
inline float quantize_block32(const float* x, int8_t* qs, int32_t* sum) {
  const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  const float d = amax / 127.0f;
  const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  const __m512i q0 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v0, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512i q1 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(v1, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm512_cvtepi32_epi8(q0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16), _mm512_cvtepi32_epi8(q1));
  if (sum) *sum = hsum_i32(_mm512_add_epi32(q0, q1));
  return d;
}

}  // namespace

void quantize_q8_0(const float* x, void* dst, int64_t n) {
  auto* blocks = static_cast<quant::BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / quant::kQK; ++b) {
    const float d = quantize_block32(x + b * quant::kQK, blocks[b].qs, nullptr);
    blocks[b].d = fp32_to_fp16(d);
  }
}

void quantize_q8_1(const float* x, void* dst, int64_t n) {
  auto* blocks = static_cast<quant::BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n / quant::kQK; ++b) {
    int32_t sum = 0;
    const float d = quantize_block32(x + b * quant::kQK, blocks[b].qs, &sum);
    blocks[b].d = fp32_to_fp16(d);
    blocks[b].s = fp32_to_fp16(float(sum) * d);
  }
}

void quantize_q8_k(const float* x, void* dst, int64_t n) {
  auto* blocks = static_cast<quant::BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n / quant::kQKK; ++b) {
    const float* xb = x + b * quant::kQKK;
    quant::BlockQ8_K& out = blocks[b];
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < 16; ++i) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xb + 16 * i)));
    const float amax = _mm512_reduce_max_ps(m);
    if (amax == 0.0f) {
      std::memset(&out, 0, sizeof out);
      continue;
    }
    const float scale = 127.0f / amax;
    const __m512 s = _mm512_set1_ps(scale);
    for (int i = 0; i < 16; ++i) {
      const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(xb + 16 * i), s);
      const __m512i q = _mm512_min_epi32(_mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                                         _mm512_set1_epi32(127));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out.qs + 16 * i), _mm512_cvtepi32_epi8(q));
      out.bsums[i] = int16_t(hsum_i32(q));
    }
    out.d = 1.0f / scale;
  }
}

}  // namespace ember::cpu::avx512
