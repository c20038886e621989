// AVX2 activation quantizers: Q8_0, Q8_1 and Q8_K, all rounding half to even.
// Same arithmetic as lib/quant/q8_0.cpp, q8_1.cpp, q8_k.cpp, so the codes are identical.
#include "cpu/kernels/avx2/simd.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

// Codes of one 32-value block; returns the unrounded d.
inline float quantize_block32(const float* x, int8_t* qs, int32_t* sum) {
  __m256 v[4];
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    m = _mm256_max_ps(m, abs_ps(v[i]));
  }
  const float amax = hmax(m);
  const float d = amax / 127.0f;
  const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) {
    const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[i], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q[i] = _mm256_cvtps_epi32(r);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), pack_i8(q[0], q[1], q[2], q[3]));
  if (sum) *sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
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
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 32; ++i) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(xb + 8 * i)));
    const float amax = hmax(m);
    if (amax == 0.0f) {
      std::memset(&out, 0, sizeof out);
      continue;
    }
    const float scale = 127.0f / amax;
    const __m256 s = _mm256_set1_ps(scale);
    for (int j = 0; j < 8; ++j) {  // 32 values per iteration
      __m256i q[4];
      for (int i = 0; i < 4; ++i) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xb + 32 * j + 8 * i), s);
        const __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[i] = _mm256_min_epi32(_mm256_cvttps_epi32(r), _mm256_set1_epi32(127));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.qs + 32 * j), pack_i8(q[0], q[1], q[2], q[3]));
      out.bsums[2 * j] = int16_t(hsum_i32(_mm256_add_epi32(q[0], q[1])));
      out.bsums[2 * j + 1] = int16_t(hsum_i32(_mm256_add_epi32(q[2], q[3])));
    }
    out.d = 1.0f / scale;
  }
}

}  // namespace ember::cpu::EMBER_AVX2_NS
