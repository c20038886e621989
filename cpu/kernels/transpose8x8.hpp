// The 8 x 8 dword transpose that the AVX2 rows8 batches and the AVX-512 packed
// super-block path both use (256-bit AVX2 instructions; included only by files
// compiled with at least AVX2's flags). Internal linkage: see cpu/kernels/tile.hpp.
#pragma once

#include <immintrin.h>

namespace ember::cpu {
namespace {

// out[k] lane c = dword k of in[c].
inline void transpose_8x8(const __m256i in[8], __m256i out[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    out[k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);
    out[4 + k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
  }
}

}  // namespace
}  // namespace ember::cpu
