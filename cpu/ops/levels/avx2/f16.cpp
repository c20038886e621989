// The AVX2 level's F16 conversions (F16C, rounding to nearest even as fp32_to_fp16) and
// the F16-table GELU row; the AVX-512 level uses to_f16 and the GELU row too.
#include "common/fp16.hpp"
#include "cpu/kernels/x86_intrinsics.hpp"
#include "cpu/ops/levels/gelu_f16.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::avx2 {

void to_f16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void f16_to_f32(const void* row, float* out, int n) {
  const auto* h = static_cast<const uint16_t*>(row);
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  for (; i < n; ++i) out[i] = fp16_to_fp32(h[i]);
}

// Eight at a time: F16C rounds the inputs to F16 indices and widens the table's values.
void gelu_glu_row(const float* gate, const float* up, float* out, int64_t n) {
  const uint16_t* table = scalar::gelu_f16_table();
  const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
  int64_t i = 0;
  alignas(16) uint16_t idx[8], val[8];
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    _mm_store_si128(reinterpret_cast<__m128i*>(idx), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    for (int l = 0; l < 8; ++l) val[l] = table[idx[l]];
    __m256 g = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(val)));
    g = _mm256_blendv_ps(g, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LE_OQ));
    g = _mm256_blendv_ps(g, x, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(g, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = gelu_f16(table, gate[i]) * up[i];
}

}  // namespace ember::cpu::avx2
