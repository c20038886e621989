// Block arithmetic of the weight formats for the CUDA kernels, written once for host
// and device (issue 16, point 3): every function is __host__ __device__ under nvcc and
// plain inline C++ under the host compiler, so the ordinary test suite checks each one
// against lib/quant on machines without a GPU (tests/cuda/test_block_math.cpp), and a
// numeric mistake shows up there rather than only on a device.
//
// Values are computed with the reference's roundings (lib/quant/*.cpp): where the
// reference rounds a product before adding (quant::mul_then_add), so does mul_rn here;
// nvcc would otherwise contract `a * b + c` into one FMA and change the last bit.
// Blocks are read byte by byte (little-endian), so no alignment is assumed.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/fp16.hpp"
#include "common/hd.hpp"


namespace ember::cuda::dev {

// x * y rounded to float, never fused with what follows.
EMBER_HD float mul_rn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(x, y);
#else
  volatile float product = x * y;
  return product;
#endif
}

EMBER_HD void put_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v & 0xff);
  p[1] = uint8_t(v >> 8);
}
EMBER_HD uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
EMBER_HD uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// round to nearest, ties to even (the reference's std::nearbyint).
EMBER_HD float round_even_f(float v) {
#if defined(__CUDA_ARCH__)
  return rintf(v);
#else
  return std::nearbyint(v);
#endif
}

// The conversions of common/fp16.hpp (host and device alike), under the names used here.
EMBER_HD float half_to_float(uint16_t h) { return fp16_to_fp32(h); }
EMBER_HD uint16_t float_to_half(float f) { return fp32_to_fp16(f); }
EMBER_HD float bf16_to_float(uint16_t b) { return bf16_to_fp32(b); }
EMBER_HD float half_at(const uint8_t* p) { return half_to_float(load_u16(p)); }

// ---- 32-value blocks: value i (0..31) of the block at b ----

// Low nibble of byte i for values 0..15, high nibble of byte i - 16 for 16..31.
EMBER_HD int nibble32(const uint8_t* qs, int i) { return i < 16 ? (qs[i] & 15) : (qs[i - 16] >> 4); }

constexpr int kQ4_0Bytes = 18, kQ4_1Bytes = 20, kQ5_0Bytes = 22, kQ5_1Bytes = 24, kQ8_0Bytes = 34;

EMBER_HD float q4_0_value(const uint8_t* b, int i) { return float(nibble32(b + 2, i) - 8) * half_at(b); }

EMBER_HD float q4_1_value(const uint8_t* b, int i) {
  return mul_rn(float(nibble32(b + 4, i)), half_at(b)) + half_at(b + 2);
}

EMBER_HD int q5_code(const uint8_t* qh, const uint8_t* qs, int i) {
  return nibble32(qs, i) | int((load_u32(qh) >> i) & 1u) << 4;
}

EMBER_HD float q5_0_value(const uint8_t* b, int i) { return float(q5_code(b + 2, b + 6, i) - 16) * half_at(b); }

EMBER_HD float q5_1_value(const uint8_t* b, int i) {
  return mul_rn(float(q5_code(b + 4, b + 8, i)), half_at(b)) + half_at(b + 2);
}

EMBER_HD float q8_0_value(const uint8_t* b, int i) { return half_at(b) * float(int8_t(b[2 + i])); }

// ---- 256-value super-blocks: value i (0..255) ----

constexpr int kQ4_KBytes = 144, kQ5_KBytes = 176, kQ6_KBytes = 210;

// 6-bit scale (or, with `min`, minimum) of sub-block j of a Q4_K/Q5_K block's 12 bytes.
EMBER_HD int k_scale(const uint8_t* s, int j, bool min) {
  const int o = min ? 4 : 0;
  if (j < 4) return s[j + o] & 63;
  const int low = min ? (s[j + 4] >> 4) : (s[j + 4] & 15);
  return low | ((s[j - 4 + o] >> 6) << 4);
}

// x = d * sc[j] * q - dmin * mn[j], each product rounded (the reference's order).
EMBER_HD float k_value(const uint8_t* b, int j, int q) {
  const float scale = half_at(b) * float(k_scale(b + 4, j, false));
  const float offset = mul_rn(half_at(b + 2), float(k_scale(b + 4, j, true)));
  return mul_rn(scale, float(q)) + -offset;
}

EMBER_HD float q4_k_value(const uint8_t* b, int i) {
  const int j = i / 32, l = i % 32;
  return k_value(b, j, (b[16 + 32 * (j / 2) + l] >> (4 * (j % 2))) & 15);
}

EMBER_HD float q5_k_value(const uint8_t* b, int i) {
  const int j = i / 32, l = i % 32;
  const int low = (b[48 + 32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
  return k_value(b, j, low | ((b[16 + l] >> j) & 1) << 4);
}

EMBER_HD float q6_k_value(const uint8_t* b, int i) {
  const uint8_t *ql = b, *qh = b + 128;
  const int h = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
  const uint8_t low_byte = ql[64 * h + l + 32 * (quarter & 1)];
  const int low = quarter < 2 ? (low_byte & 15) : (low_byte >> 4);
  const int code = low | ((qh[32 * h + l] >> (2 * quarter)) & 3) << 4;
  const float scale = mul_rn(half_at(b + 208), float(int8_t(b[192 + i / 16])));
  return scale * float(code - 32);
}

// ---- activation quantizers of the matmul contract (lib/quant/q8_0.cpp, q8_1.cpp,
// q8_k.cpp): the codes the CPU computes for the same activations ----

constexpr int kQ8_1Bytes = 36, kQ8_KBytes = 292;

// max of |x[0, n)| with NaN ignored (std::fmax's rule).
EMBER_HD float abs_max(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    amax = a > amax ? a : amax;
  }
  return amax;
}
// One block of 32: d = max|x| / 127 (f16), q = round_half_even(x * (127 / max|x|)).
EMBER_HD void q8_0_quantize(const float* x, uint8_t* out) {
  const float amax = abs_max(x, 32);
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  put_u16(out, float_to_half(amax / 127.0f));
  for (int i = 0; i < 32; ++i) out[2 + i] = uint8_t(int8_t(round_even_f(x[i] * id)));
}

// As Q8_0, plus s = f16(d * sum(q)) from the unrounded d.
EMBER_HD void q8_1_quantize(const float* x, uint8_t* out) {
  const float amax = abs_max(x, 32);
  const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
  int32_t sum = 0;
  for (int i = 0; i < 32; ++i) {
    const int8_t q = int8_t(round_even_f(x[i] * id));
    out[4 + i] = uint8_t(q);
    sum += q;
  }
  put_u16(out, float_to_half(d));
  put_u16(out + 2, float_to_half(float(sum) * d));
}

// One block of 256: f32 d = 1 / scale, q = min(127, round_half_even(scale * x)) with
// scale = 127 / max|x|, and the sums of each 16 codes; all zero when max|x| is 0.
EMBER_HD void q8_k_quantize(const float* x, uint8_t* out) {
  const float amax = abs_max(x, 256);
  if (amax == 0.0f) {
    for (int i = 0; i < kQ8_KBytes; ++i) out[i] = 0;
    return;
  }
  const float scale = 127.0f / amax;
  for (int i = 0; i < 256; ++i) {
    const float r = round_even_f(scale * x[i]);
    out[4 + i] = uint8_t(int8_t(r < 127.0f ? r : 127.0f));
  }
  for (int j = 0; j < 16; ++j) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += int8_t(out[4 + 16 * j + i]);
    put_u16(out + 260 + 2 * j, uint16_t(int16_t(sum)));
  }
  const uint32_t d = float_to_bits(1.0f / scale);
  for (int i = 0; i < 4; ++i) out[i] = uint8_t(d >> (8 * i));
}

// ---- dot products of one weight block with one activation block ----
// The integer sums are exact; each block's result is its float scale times them. A
// kernel adds the blocks' results in its own order, so a row's dot product agrees with
// quant::dot_row to rounding, not bit for bit.

// sum over a 32-value block of (weight code - offset) * activation code.
template <class Code>
EMBER_HD int32_t block_isum(Code code, const uint8_t* a_codes, int offset) {
  int32_t sum = 0;
  for (int i = 0; i < 32; ++i) sum += (code(i) - offset) * int32_t(int8_t(a_codes[i]));
  return sum;
}

// Q4_0, Q5_0, Q8_0 with a Q8_0 activation block: d_w * d_a * sum.
EMBER_HD float q4_0_dot(const uint8_t* w, const uint8_t* a) {
  const int32_t s = block_isum([w](int i) { return nibble32(w + 2, i); }, a + 2, 8);
  return mul_rn(half_at(w), half_at(a)) * float(s);
}
EMBER_HD float q5_0_dot(const uint8_t* w, const uint8_t* a) {
  const int32_t s = block_isum([w](int i) { return q5_code(w + 2, w + 6, i); }, a + 2, 16);
  return mul_rn(half_at(w), half_at(a)) * float(s);
}
EMBER_HD float q8_0_dot(const uint8_t* w, const uint8_t* a) {
  const int32_t s = block_isum([w](int i) { return int(int8_t(w[2 + i])); }, a + 2, 0);
  return mul_rn(half_at(w), half_at(a)) * float(s);
}
// Q4_1, Q5_1 with a Q8_1 block: d_w * d_a * sum(q * q_a) + m_w * s_a.
EMBER_HD float q4_1_dot(const uint8_t* w, const uint8_t* a) {
  const int32_t s = block_isum([w](int i) { return nibble32(w + 4, i); }, a + 4, 0);
  return mul_rn(mul_rn(half_at(w), half_at(a)), float(s)) + mul_rn(half_at(w + 2), half_at(a + 2));
}
EMBER_HD float q5_1_dot(const uint8_t* w, const uint8_t* a) {
  const int32_t s = block_isum([w](int i) { return q5_code(w + 4, w + 8, i); }, a + 4, 0);
  return mul_rn(mul_rn(half_at(w), half_at(a)), float(s)) + mul_rn(half_at(w + 2), half_at(a + 2));
}

EMBER_HD float q8_k_d(const uint8_t* a) { return bits_to_float(load_u32(a)); }
EMBER_HD int32_t q8_k_bsum(const uint8_t* a, int j) { return int16_t(load_u16(a + 260 + 2 * j)); }

// Q4_K, Q5_K with a Q8_K block: d * d_a * sum_j sc[j] * sum(q * q_a)
// - dmin * d_a * sum_j mn[j] * (bsums[2j] + bsums[2j + 1]).
template <class Code>
EMBER_HD float k_dot(const uint8_t* w, const uint8_t* a, Code code) {
  int32_t scaled = 0, mins = 0;
  for (int j = 0; j < 8; ++j) {
    int32_t s = 0;
    for (int l = 0; l < 32; ++l) s += code(j, l) * int32_t(int8_t(a[4 + 32 * j + l]));
    scaled += k_scale(w + 4, j, false) * s;
    mins += k_scale(w + 4, j, true) * (q8_k_bsum(a, 2 * j) + q8_k_bsum(a, 2 * j + 1));
  }
  const float da = q8_k_d(a);
  return mul_rn(mul_rn(half_at(w), da), float(scaled)) - mul_rn(mul_rn(half_at(w + 2), da), float(mins));
}
// Code l (0..31) of sub-block j (0..7) of a Q4_K / Q5_K super-block.
EMBER_HD int q4_k_code(const uint8_t* w, int j, int l) { return (w[16 + 32 * (j / 2) + l] >> (4 * (j % 2))) & 15; }
EMBER_HD int q5_k_code(const uint8_t* w, int j, int l) {
  return ((w[48 + 32 * (j / 2) + l] >> (4 * (j % 2))) & 15) | ((w[16 + l] >> j) & 1) << 4;
}
EMBER_HD float q4_k_dot(const uint8_t* w, const uint8_t* a) {
  return k_dot(w, a, [w](int j, int l) { return q4_k_code(w, j, l); });
}
EMBER_HD float q5_k_dot(const uint8_t* w, const uint8_t* a) {
  return k_dot(w, a, [w](int j, int l) { return q5_k_code(w, j, l); });
}
// Code i (0..255) of a Q6_K super-block (0..63).
EMBER_HD int q6_k_code(const uint8_t* w, int i) {
  const int h = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
  const uint8_t low_byte = w[64 * h + l + 32 * (quarter & 1)];
  const int low = quarter < 2 ? (low_byte & 15) : (low_byte >> 4);
  return low | ((w[128 + 32 * h + l] >> (2 * quarter)) & 3) << 4;
}
// Q6_K with a Q8_K block: d * d_a * sum_g sc[g] * sum((q - 32) * q_a) over 16 groups of 16.
EMBER_HD float q6_k_dot(const uint8_t* w, const uint8_t* a) {
  int32_t total = 0;
  for (int g = 0; g < 16; ++g) {
    int32_t s = 0;
    for (int k = 0; k < 16; ++k) {
      const int i = 16 * g + k;
      s += (q6_k_code(w, i) - 32) * int32_t(int8_t(a[4 + i]));
    }
    total += int32_t(int8_t(w[192 + g])) * s;
  }
  return mul_rn(half_at(w + 208), q8_k_d(a)) * float(total);
}

// ---- online softmax (flash attention's running state for one query row) ----

EMBER_HD float exp_f(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

constexpr uint32_t kNegInfBits = 0xff800000u;

// Running maximum and sum of exp(score - max) over the scores seen so far.
struct SoftmaxState {
  float max;
  float sum;
};

EMBER_HD SoftmaxState softmax_start() { return {bits_to_float(kNegInfBits), 0.0f}; }

// Takes one more score (-inf: a masked cell, weight 0) into the state. Returns the
// factor by which the values accumulated so far must be multiplied and sets *weight to
// the new score's weight, both relative to the new maximum.
EMBER_HD float softmax_push(SoftmaxState& s, float score, float* weight) {
  if (score <= s.max) {
    *weight = float_to_bits(score) == kNegInfBits ? 0.0f : exp_f(score - s.max);
    s.sum += *weight;
    return 1.0f;
  }
  const float rescale = float_to_bits(s.max) == kNegInfBits ? 0.0f : exp_f(s.max - score);
  s.sum = s.sum * rescale + 1.0f;
  s.max = score;
  *weight = 1.0f;
  return rescale;
}

// Merges the states of two disjoint key ranges (split-K); *scale_a and *scale_b are the
// factors for each part's accumulated values (0 for a part that saw only masked cells).
EMBER_HD SoftmaxState softmax_merge(SoftmaxState a, SoftmaxState b, float* scale_a, float* scale_b) {
  const float m = a.max > b.max ? a.max : b.max;
  *scale_a = float_to_bits(a.max) == kNegInfBits ? 0.0f : exp_f(a.max - m);
  *scale_b = float_to_bits(b.max) == kNegInfBits ? 0.0f : exp_f(b.max - m);
  return {m, a.sum * *scale_a + b.sum * *scale_b};
}

}  // namespace ember::cuda::dev
