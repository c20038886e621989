// Q8_W: ember's INT8 weights for W8A8, one scale per output channel (weight row); and
// Q8_T, its activation format, one scale per token (activation row). Neither is a GGUF
// type (ids 1102, 1103): only ember loads files that use Q8_W.
//
// Both store a row as Q8_0 does, 32 values per 34 bytes (fp16 d, then 32 int8 codes),
// but one quantize call (one row) has a single d, written into every block:
//   d = max |x| / 127 over the row, q = round-half-even(x / d)   (x = d * q)
// Q8_0's own d is per block; the bytes of a Q8_W row are also a valid Q8_0 row.
//
// Dot product: the whole row's code products are one integer sum, scaled once,
//   dot = (d_w * d_a) * sum(q_w * q_a),
// with d_w and d_a read from the first block (a row whose blocks disagree is not Q8_W).
// A caller that passes several rows to one quantize call gets one scale for all of
// them: the quantizers of ember quantize and of the CPU matmul pass one row.
#include <cmath>
#include <cstring>

#include "quant/blocks.hpp"
#include "quant/formats.hpp"

namespace ember::quant::ref {
namespace {

// One scale for all n values; codes by multiplying with 127 / max|x| as Q8_0's
// activation rounding does.
void quantize_row_scale(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_0*>(dst);
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(src[i]));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const uint16_t d = fp32_to_fp16(amax / 127.0f);
  for (int64_t b = 0; b < n / kQK; ++b) {
    blocks[b].d = d;
    for (int i = 0; i < kQK; ++i) blocks[b].qs[i] = int8_t(std::nearbyint(src[b * kQK + i] * id));
  }
}

}  // namespace

void dequantize_q8_w(const void* src, float* dst, int64_t n) { dequantize_q8_0(src, dst, n); }
void quantize_q8_w(const float* src, void* dst, int64_t n) { quantize_row_scale(src, dst, n); }
void dequantize_q8_t(const void* src, float* dst, int64_t n) { dequantize_q8_0(src, dst, n); }
void quantize_q8_t(const float* src, void* dst, int64_t n) { quantize_row_scale(src, dst, n); }

float dot_q8_w(const void* w, const void* a_q8_t, int64_t n) {
  if (n == 0) return 0.0f;
  const auto* wb = static_cast<const BlockQ8_0*>(w);
  const auto* ab = static_cast<const BlockQ8_0*>(a_q8_t);
  int64_t sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b)
    for (int i = 0; i < kQK; ++i) sum += int32_t(wb[b].qs[i]) * int32_t(ab[b].qs[i]);
  return (load_fp16(wb[0].d) * load_fp16(ab[0].d)) * float(sum);
}

}  // namespace ember::quant::ref
