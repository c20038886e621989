// Q4_K: super-blocks of 256 values in 8 sub-blocks of 32;
// x = d * sc[j] * q - dmin * mn[j], q in [0, 16), 6-bit sc and mn, fp16 d and dmin.
// Activations: Q8_K (its bsums give the min term per pair of 16-value groups).
#include <algorithm>
#include <cmath>

#include "quant/blocks.hpp"
#include "quant/formats.hpp"
#include "quant/k_quantize.hpp"
#include "quant/lanes.hpp"

namespace ember::quant::ref {

void dequantize_q4_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_K*>(src);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ4_K& blk = blocks[b];
    const float d = load_fp16(blk.d), dmin = load_fp16(blk.dmin);
    const KScales s = unpack_k_scales(blk.scales);
    float* y = dst + b * kQKK;
    for (int j = 0; j < 8; ++j) {
      const float scale = d * float(s.sc[j]), offset = dmin * float(s.mn[j]);
      const uint8_t* qs = blk.qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) y[32 * j + l] = mul_then_add(scale, float((qs[l] >> shift) & 15), -offset);
    }
  }
}

// Simple nearest-rounding quantizer (not ggml's iterative search): see k_quantize.hpp.
void quantize_q4_k(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ4_K*>(dst);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    BlockQ4_K& blk = blocks[b];
    uint8_t q[kQKK];
    const KQuantized k = quantize_k_offset(src + b * kQKK, 15, q);
    blk.d = k.d;
    blk.dmin = k.dmin;
    pack_k_scales(k.sc, k.mn, blk.scales);
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) blk.qs[32 * g + l] = uint8_t(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
  }
}

namespace {

// Per sub-block j of a super-block: sc[j] * sum(q * q_a) and mn[j] * (bsums[2j] + bsums[2j + 1]).
struct SubBlockSums {
  int32_t scaled[8], mins[8];
};
SubBlockSums sub_block_sums(const BlockQ4_K& blk, const BlockQ8_K& act) {
  const KScales s = unpack_k_scales(blk.scales);
  SubBlockSums r;
  for (int j = 0; j < 8; ++j) {
    const uint8_t* qs = blk.qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    int32_t part = 0;
    for (int l = 0; l < 32; ++l) part += ((qs[l] >> shift) & 15) * int32_t(act.qs[32 * j + l]);
    r.scaled[j] = int32_t(s.sc[j]) * part;
    r.mins[j] = int32_t(s.mn[j]) * (act.bsums[2 * j] + act.bsums[2 * j + 1]);
  }
  return r;
}

// llama.cpp's order (quant/lanes.hpp): acc and min are updated once per `group`
// sub-blocks (8: per super-block, llama.cpp's gemv; 2: per 64 values, its gemm).
float dot_q4_k_in_groups(const void* w, const void* a_q8_k, int64_t n, int group) {
  const auto* wb = static_cast<const BlockQ4_K*>(w);
  const auto* ab = static_cast<const BlockQ8_K*>(a_q8_k);
  float acc = 0.0f, acc_min = 0.0f;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const SubBlockSums sums = sub_block_sums(wb[b], ab[b]);
    const float d = load_fp16(wb[b].d) * ab[b].d, dmin = load_fp16(wb[b].dmin) * ab[b].d;
    for (int j0 = 0; j0 < 8; j0 += group) {
      int32_t sumi = 0, summ = 0;
      for (int j = j0; j < j0 + group; ++j) sumi += sums.scaled[j], summ += sums.mins[j];
      acc = std::fma(float(sumi), d, acc);
      acc_min = std::fma(float(summ), dmin, acc_min);
    }
  }
  return acc - acc_min;
}

}  // namespace

// Per super-block: (fp16(d) * d_a) * sum_j sc[j] * sum(q * q_a) - (fp16(dmin) * d_a) * sum_j mn[j] * (bsums[2j] + bsums[2j + 1]).
float dot_q4_k(const void* w, const void* a_q8_k, int64_t n) { return dot_q4_k_in_groups(w, a_q8_k, n, 8); }

// As dot_q4_k, with the two accumulators updated after every 64 values (sub-blocks 2i, 2i + 1).
float dot_q4_k_grouped(const void* w, const void* a_q8_k, int64_t n) { return dot_q4_k_in_groups(w, a_q8_k, n, 2); }

}  // namespace ember::quant::ref
