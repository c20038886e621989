// Helpers shared by the ARM64 kernels. Every file of kernels/neon is compiled once per
// ARM level (cpu/CMakeLists.txt) with that level's -march and EMBER_NEON_NS set to its
// namespace (neon, dotprod, i8mm: cpu/kernels/levels.hpp); what differs between the
// levels is chosen here from the compiler's feature macros. Internal linkage only, as
// in cpu/kernels/tile.hpp: the three compilations must not share instances.
#pragma once

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu/kernels/bytes.hpp"
#include "cpu/kernels/kernels.hpp"
#include "quant/blocks.hpp"

#if !defined(EMBER_NEON_NS)
#error "kernels/neon is compiled once per ARM level with EMBER_NEON_NS naming it (cpu/CMakeLists.txt)"
#endif

namespace ember::cpu::EMBER_NEON_NS {

// Activation quantizers of this level (activations.cpp), bit-identical to lib/quant's.
void quantize_q8_0(const float* x, void* dst, int64_t n);
void quantize_q8_1(const float* x, void* dst, int64_t n);
void quantize_q8_k(const float* x, void* dst, int64_t n);

namespace {

// fp16 -> f32 with FCVTL (base ARMv8-A; exact, as ember::fp16_to_fp32).
inline float half(uint16_t h) { return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0); }
inline float half_at(const std::byte* p) { return half(load_u16(p)); }

inline int8x16_t load_s8(const std::byte* p) { return vld1q_s8(reinterpret_cast<const int8_t*>(p)); }
inline uint8x16_t load_u8(const std::byte* p) { return vld1q_u8(reinterpret_cast<const uint8_t*>(p)); }

// The integer core of every quantized kernel: int32 lane m of the result adds the
// products of bytes 4m .. 4m + 3 of a and b. SDOT does exactly this at the dotprod and
// i8mm levels; plain NEON multiplies into int16 (|product| <= 128 * 128 fits), then
// adds neighbours twice (pairs, then pairs of pairs), which groups the same four
// products. The lanes are therefore the same at every level, which matters for the
// formats summed in llama.cpp's order (quant/lanes.hpp: one float lane per group of 4).
inline int32x4_t dot4(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, a, b);
#else
  const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
  const int16x8_t hi = vmull_high_s8(a, b);
  return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
#endif
}

// acc lane r += dot(bytes 4r .. 4r + 3 of q, bytes 4L .. 4L + 3 of y).
template <int L>
inline int32x4_t dot_lane(int32x4_t acc, int8x16_t q, int8x16_t y) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_laneq_s32(acc, q, y, L);
#else
  return dot4(acc, q, vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(y), L)));
#endif
}

// Eight float lanes (lo: lanes 0-3, hi: 4-7) added as quant::Lanes8::sum: the upper
// four onto the lower four, then lanes 2-3 onto 0-1, then lane 1 onto lane 0.
inline float lanes8_sum(float32x4_t lo, float32x4_t hi) {
  const float32x4_t s = vaddq_f32(hi, lo);
  const float32x2_t t = vadd_f32(vget_low_f32(s), vget_high_f32(s));
  return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}

// The 32 4-bit codes of a Q4_0-style block (16 bytes at p) in value order: values
// 0-15 from the low nibbles, 16-31 from the high ones.
inline void nibbles_32(const std::byte* p, uint8x16_t& lo, uint8x16_t& hi) {
  const uint8x16_t q = load_u8(p);
  lo = vandq_u8(q, vdupq_n_u8(0x0f));
  hi = vshrq_n_u8(q, 4);
}

// 0x10 in byte i where bit i of the 16 bits is set (the fifth bit of Q5 codes).
inline uint8x16_t high_bits_16(uint32_t bits16) {
  const uint8x16_t spread = vcombine_u8(vdup_n_u8(uint8_t(bits16)), vdup_n_u8(uint8_t(bits16 >> 8)));
  const uint8x16_t select = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull));
  return vandq_u8(vtstq_u8(spread, select), vdupq_n_u8(0x10));
}

}  // namespace
}  // namespace ember::cpu::EMBER_NEON_NS
