// Q5_K: as Q4_K with a fifth bit per code (q in [0, 32)) kept in qh. Activations: Q8_K.
#include "quant/blocks.hpp"
#include "quant/formats.hpp"
#include "quant/k_quantize.hpp"

namespace ember::quant::ref {
namespace {
// Code l of sub-block j.
inline int code(const BlockQ5_K& blk, int j, int l) {
  const int low = (blk.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
  return low | ((blk.qh[l] >> j) & 1) << 4;
}
}  // namespace

void dequantize_q5_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_K*>(src);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ5_K& blk = blocks[b];
    const float d = load_fp16(blk.d), dmin = load_fp16(blk.dmin);
    const KScales s = unpack_k_scales(blk.scales);
    float* y = dst + b * kQKK;
    for (int j = 0; j < 8; ++j) {
      const float scale = d * float(s.sc[j]), offset = dmin * float(s.mn[j]);
      for (int l = 0; l < 32; ++l) y[32 * j + l] = mul_then_add(scale, float(code(blk, j, l)), -offset);
    }
  }
}

void quantize_q5_k(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ5_K*>(dst);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    BlockQ5_K& blk = blocks[b];
    uint8_t q[kQKK];
    const KQuantized k = quantize_k_offset(src + b * kQKK, 31, q);
    blk.d = k.d;
    blk.dmin = k.dmin;
    pack_k_scales(k.sc, k.mn, blk.scales);
    for (int l = 0; l < 32; ++l) blk.qh[l] = 0;
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) blk.qs[32 * g + l] = uint8_t((q[64 * g + l] & 15) | ((q[64 * g + 32 + l] & 15) << 4));
    for (int j = 0; j < 8; ++j)
      for (int l = 0; l < 32; ++l) blk.qh[l] = uint8_t(blk.qh[l] | ((q[32 * j + l] >> 4) << j));
  }
}

// As dot_q4_k with 5-bit codes.
float dot_q5_k(const void* w, const void* a_q8_k, int64_t n) {
  const auto* wb = static_cast<const BlockQ5_K*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a_q8_k);
  double sum = 0.0;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ5_K& blk = wb[b];
    const BlockQ8_K& act = ab[b];
    const KScales s = unpack_k_scales(blk.scales);
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      int32_t part = 0;
      for (int l = 0; l < 32; ++l) part += code(blk, j, l) * int32_t(act.qs[32 * j + l]);
      sumi += int32_t(s.sc[j]) * part;
      summ += int32_t(s.mn[j]) * (act.bsums[2 * j] + act.bsums[2 * j + 1]);
    }
    const float d = load_fp16(blk.d) * act.d, dmin = load_fp16(blk.dmin) * act.d;
    sum += d * float(sumi) - dmin * float(summ);
  }
  return float(sum);
}

}  // namespace ember::quant::ref
