// The vector of 16 horizontal sums of 16 AVX-512 accumulators (lane j = the sum of
// acc[j]'s lanes), by a transposing tree of 15 shuffle-add pairs instead of a horizontal
// sum per accumulator. Used by the fused decode
// attention scores (ops/levels/avx512/attention_decode.cpp). Compile with AVX-512 flags.
#pragma once

#include "cpu/kernels/x86_intrinsics.hpp"

namespace ember::cpu::avx512 {

inline __m512 reduce16(const __m512* acc) {
  __m512 a8[8], a4[4], a2[2];
  // Within each 128-bit block: lanes {x0 + x2, y0 + y2, x1 + x3, y1 + y3}.
  for (int i = 0; i < 8; ++i)
    a8[i] = _mm512_add_ps(_mm512_unpacklo_ps(acc[2 * i], acc[2 * i + 1]),
                          _mm512_unpackhi_ps(acc[2 * i], acc[2 * i + 1]));
  // Within each 128-bit block: the block's sum of accumulators 4i .. 4i + 3.
  for (int i = 0; i < 4; ++i)
    a4[i] = _mm512_add_ps(_mm512_shuffle_ps(a8[2 * i], a8[2 * i + 1], 0x44),
                          _mm512_shuffle_ps(a8[2 * i], a8[2 * i + 1], 0xEE));
  // Blocks {k0-3: b0 + b1, k0-3: b2 + b3, k4-7: b0 + b1, k4-7: b2 + b3}.
  for (int i = 0; i < 2; ++i)
    a2[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a4[2 * i], a4[2 * i + 1], 0x88),
                          _mm512_shuffle_f32x4(a4[2 * i], a4[2 * i + 1], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(a2[0], a2[1], 0x88), _mm512_shuffle_f32x4(a2[0], a2[1], 0xDD));
}

}  // namespace ember::cpu::avx512
