// The summation order of llama.cpp's x86 dot products, for the formats whose ggml
// kernels all share it (Q8_0 and Q5_0 weights with Q8_0 activations, Q4_K and Q6_K
// with Q8_K). Integer parts are exact in any order; only the float steps below are
// order-sensitive, and every ember level (scalar, AVX2, AVX-512) performs exactly
// these, so its products are bit-identical to llama.cpp's on the same codes.
//
// - Q8_0 / Q5_0 (ggml_vec_dot_q{8,5}_0_q8_0, and tinyBLAS for batches): eight float
//   lanes per dot product. Lane m takes the integer sum of values 4m .. 4m+3 of each
//   32-value block: lane[m] = fma(d_w * d_a, float(sum), lane[m]), block after block.
// - Q6_K (ggml_vec_dot_q6_K_q8_K): eight lanes; lane m takes, per super-block, the
//   integer sum over values v with (v mod 32) / 4 == m of sc[v / 16] * (q - 32) * a:
//   lane[m] = fma(d_a * d_w, float(sum), lane[m]).
// - Q4_K (ggml's repacked 8x8 gemv): two scalars per dot product,
//   acc = fma(float(sum_j sc_j * dot_j), d_w * d_a, acc) and
//   min = fma(float(sum_j mn_j * bsum_j), dmin_w * d_a, min), super-block after
//   super-block; the result is acc - min. ggml's repacked gemm, which llama.cpp runs
//   for the tokens of a batch in whole groups of 4 (the rest go through the gemv),
//   updates both after every 64 values (sub-blocks 2i and 2i + 1) instead
//   (dot_q4_k_grouped, WeightKernels::dot_tile_grouped).
// The lanes are then added as ggml's hsum_float_8 does (Lanes8::sum).
#pragma once

#include <cmath>
#include <cstdint>

namespace ember::quant {

struct Lanes8 {
  float v[8] = {};

  void madd(float d, const int32_t (&sums)[8]) {
    for (int m = 0; m < 8; ++m) v[m] = std::fma(d, float(sums[m]), v[m]);
  }
  // The upper four lanes onto the lower four, then lanes 2-3 onto 0-1, then lane 1 onto 0.
  float sum() const {
    const float s0 = v[4] + v[0], s1 = v[5] + v[1], s2 = v[6] + v[2], s3 = v[7] + v[3];
    return (s0 + s2) + (s1 + s3);
  }
};

}  // namespace ember::quant
