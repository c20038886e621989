// ARM64 activation quantizers: Q8_0, Q8_1 and Q8_K, all rounding half to even
// (FCVTNS), with the arithmetic of lib/quant/q8_0.cpp, q8_1.cpp, q8_k.cpp, so the codes
// and scales are identical.
#include "common/fp16.hpp"
#include "cpu/kernels/neon/simd.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

// 16 int32 in [-128, 127] to 16 int8, in order.
inline int8x16_t narrow16(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d) {
  return vcombine_s8(vmovn_s16(vcombine_s16(vmovn_s32(a), vmovn_s32(b))),
                     vmovn_s16(vcombine_s16(vmovn_s32(c), vmovn_s32(d))));
}

// Codes of one 32-value block; returns the unrounded d.
inline float quantize_block32(const float* x, int8_t* qs, int32_t* sum) {
  float32x4_t v[8];
  float32x4_t m = vdupq_n_f32(0.0f);
  for (int i = 0; i < 8; ++i) {
    v[i] = vld1q_f32(x + 4 * i);
    m = vmaxq_f32(m, vabsq_f32(v[i]));
  }
  const float amax = vmaxvq_f32(m);
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  int32x4_t q[8];
  for (int i = 0; i < 8; ++i) q[i] = vcvtnq_s32_f32(vmulq_n_f32(v[i], id));
  vst1q_s8(qs, narrow16(q[0], q[1], q[2], q[3]));
  vst1q_s8(qs + 16, narrow16(q[4], q[5], q[6], q[7]));
  if (sum) {
    int32x4_t s = q[0];
    for (int i = 1; i < 8; ++i) s = vaddq_s32(s, q[i]);
    *sum = vaddvq_s32(s);
  }
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
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int i = 0; i < 64; ++i) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(xb + 4 * i)));
    const float amax = vmaxvq_f32(m);
    if (amax == 0.0f) {
      std::memset(&out, 0, sizeof out);
      continue;
    }
    const float scale = 127.0f / amax;
    for (int j = 0; j < 16; ++j) {  // 16 values per iteration
      int32x4_t q[4];
      for (int i = 0; i < 4; ++i) {
        // min(127, ...): the largest magnitude times 127 / itself can round to 128.
        q[i] = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(xb + 16 * j + 4 * i), scale)), vdupq_n_s32(127));
      }
      vst1q_s8(out.qs + 16 * j, narrow16(q[0], q[1], q[2], q[3]));
      out.bsums[j] = int16_t(vaddvq_s32(vaddq_s32(vaddq_s32(q[0], q[1]), vaddq_s32(q[2], q[3]))));
    }
    out.d = 1.0f / scale;
  }
}

}  // namespace ember::cpu::EMBER_NEON_NS
