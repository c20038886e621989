// The AVX-512 level's F16 -> f32 row conversion (flash attention tiles); its to_f16 and
// GELU row are the AVX2 level's (tables.cpp).
#include "common/fp16.hpp"
#include "cpu/kernels/x86_intrinsics.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::avx512 {

void f16_to_f32(const void* row, float* out, int n) {
  const auto* h = static_cast<const uint16_t*>(row);
  int i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i))));
  for (; i < n; ++i) out[i] = fp16_to_fp32(h[i]);
}

}  // namespace ember::cpu::avx512
