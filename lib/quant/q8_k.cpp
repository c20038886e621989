// Q8_K: the activation format of Q4_K, Q5_K and Q6_K. 256 values per block,
// x = d * q with q in [-127, 127], an f32 d, and the sums of each 16 codes (bsums),
// which carry the weights' sub-block mins through the dot product.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.hpp"
#include "quant/formats.hpp"

namespace ember::quant::ref {

void dequantize_q8_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_K*>(src);
  for (int64_t b = 0; b < n / kQKK; ++b)
    for (int i = 0; i < kQKK; ++i) dst[b * kQKK + i] = blocks[b].d * float(blocks[b].qs[i]);
}

// scale = 127 / max|x|, q = min(127, round_half_even(scale * x)), d = 1 / scale. This is
// ggml's quantize_row_q8_K_ref with the sign of the scale fixed to positive (ggml divides
// by the signed value of largest magnitude, which negates every code and d together:
// the products d * q are the same).
void quantize_q8_k(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float* x = src + b * kQKK;
    BlockQ8_K& out = blocks[b];
    float amax = 0.0f;
    for (int i = 0; i < kQKK; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    if (amax == 0.0f) {
      std::memset(&out, 0, sizeof out);
      continue;
    }
    const float scale = 127.0f / amax;
    for (int i = 0; i < kQKK; ++i) out.qs[i] = int8_t(std::min(127.0f, std::nearbyint(scale * x[i])));
    for (int j = 0; j < kQKK / 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += out.qs[16 * j + i];
      out.bsums[j] = int16_t(sum);
    }
    out.d = 1.0f / scale;
  }
}

}  // namespace ember::quant::ref
