// The KV-cache formats' arithmetic (INT8, INT4 rotated, INT4 with outliers; the layout
// and quantizers are specified in lib/quant/kv_formats.hpp) for the CUDA kernels, host
// and device alike, bit-identical to lib/quant/kv_formats.cpp: a cache written on the
// GPU holds the bytes the CPU would write. Checked on the CPU by test_block_math.
//
// One call handles one group of G = 32 or 64 values (the device kernels give a group to
// a thread). Every product that feeds a sum goes through mul_rn: the reference is
// compiled without FMA contraction and nvcc would otherwise fuse.
#pragma once

#include "cuda/device/block_math.hpp"

namespace ember::cuda::dev {

constexpr int kKvOutliers = 2;  // quant::kv::kOutliers
EMBER_HD constexpr int kv_q8_bytes(int group) { return group + 2; }
EMBER_HD constexpr int kv_q4_bytes(int group) { return group / 2 + 4; }
EMBER_HD constexpr int kv_q4o_bytes(int group) { return 4 + 3 * kKvOutliers + group / 2; }

// round_half_even(v) clamped to [lo, hi]; NaN becomes lo.
EMBER_HD int round_clamp(float v, float lo, float hi) {
  const float r = round_even_f(v);
  return int(!(r >= lo) ? lo : (r > hi ? hi : r));
}

EMBER_HD int popcount(unsigned v) {
#if defined(__CUDA_ARCH__)
  return __popc(v);
#else
  return __builtin_popcount(v);
#endif
}

EMBER_HD float abs_f(float v) { return v < 0.0f ? -v : (v == 0.0f ? 0.0f : v); }

// f16 nearest to v that is <= v / >= v.
EMBER_HD uint16_t half_round_down(float v) {
  uint16_t h = float_to_half(v);
  if (half_to_float(h) > v) h = (h & 0x8000u) ? uint16_t(h + 1) : (h == 0 ? uint16_t(0x8001u) : uint16_t(h - 1));
  return h;
}
EMBER_HD uint16_t half_round_up(float v) {
  uint16_t h = float_to_half(v);
  if (half_to_float(h) < v) h = (h & 0x8000u) ? (h == 0x8000u ? uint16_t(1) : uint16_t(h - 1)) : uint16_t(h + 1);
  return h;
}

// ---- INT8: d (f16), G int8 codes ----

EMBER_HD void kv_q8_quantize(const float* x, uint8_t* out, int group) {
  float amax = 0.0f;
  for (int j = 0; j < group; ++j) amax = abs_f(x[j]) > amax ? abs_f(x[j]) : amax;  // NaN ignored
  const uint16_t d = float_to_half(amax / 127.0f);
  const float scale = half_to_float(d);
  put_u16(out, d);
  for (int j = 0; j < group; ++j)
    out[2 + j] = uint8_t(int8_t(scale > 0.0f ? round_clamp(x[j] / scale, -127.0f, 127.0f) : 0));
}

EMBER_HD float kv_q8_value(const uint8_t* block, int j) { return half_at(block) * float(int8_t(block[2 + j])); }

// ---- the rotation R_G = H_G Sigma_G / sqrt(G) of the INT4 formats ----

constexpr uint64_t kKvSigns = 0x243F6A8885A308D3ull;  // sigma_j = -1 where bit j is set (G = 64)
EMBER_HD float kv_norm(int group) { return group == 64 ? 0.125f : 0.17677669529663688f; }

EMBER_HD void hadamard_group(float* x, int group) {
  for (int h = 1; h < group; h *= 2)
    for (int i = 0; i < group; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], c = x[j + h];
        x[j] = a + c;
        x[j + h] = a - c;
      }
  const float norm = kv_norm(group);
  for (int j = 0; j < group; ++j) x[j] = x[j] * norm;
}

EMBER_HD void flip_signs_group(float* x, int group) {
  if (group != 64) return;
  for (int j = 0; j < group; ++j)
    if ((kKvSigns >> j) & 1) x[j] = -x[j];
}

EMBER_HD void rotate_group(float* x, int group) {
  flip_signs_group(x, group);
  hadamard_group(x, group);
}
EMBER_HD void unrotate_group(float* x, int group) {
  hadamard_group(x, group);
  flip_signs_group(x, group);
}

// ---- INT4: d, m (f16), G/2 bytes of codes, in the rotated basis ----

// Codes of y for offset M and scale D, and their squared error.
EMBER_HD float kv_q4_codes(const float* y, int group, float offset, float scale, uint8_t* codes) {
  float err = 0.0f;
  for (int j = 0; j < group; ++j) {
    const int c = scale > 0.0f ? round_clamp((y[j] - offset) / scale, 0.0f, 15.0f) : 0;
    codes[j] = uint8_t(c);
    const float e = mul_rn(scale, float(c)) + offset - y[j];
    err += mul_rn(e, e);
  }
  return err;
}

// Least-squares (d, m) of y ~ d * l + m, rounded to f16; false when the codes are all
// equal or d is not > 0.
EMBER_HD bool kv_q4_fit(const float* y, const uint8_t* l, int group, uint16_t& d, uint16_t& m) {
  float sl = 0.0f, sll = 0.0f, sy = 0.0f, sly = 0.0f;
  for (int j = 0; j < group; ++j) {
    const float v = float(l[j]);
    sl += v, sll += mul_rn(v, v), sy += y[j], sly += mul_rn(v, y[j]);
  }
  const float det = mul_rn(float(group), sll) - mul_rn(sl, sl);
  if (!(det > 0.0f)) return false;
  d = float_to_half((mul_rn(float(group), sly) - mul_rn(sl, sy)) / det);
  m = float_to_half((mul_rn(sll, sy) - mul_rn(sl, sly)) / det);
  return half_to_float(d) > 0.0f;
}

// One INT4 group of x (G values) into dm[0, 4) and packed[0, G / 2): the reference
// quantizer (rotation, min/max start, 31 clipping candidates with up to 3 refits).
EMBER_HD void kv_q4_quantize(const float* x, uint8_t* dm, uint8_t* packed, int group) {
  constexpr int kCandidates = 31, kRefits = 3;
  float y[64];
  uint8_t levels[64], codes[64], best_codes[64];
  for (int j = 0; j < group; ++j) y[j] = x[j];
  rotate_group(y, group);
  float lo = bits_to_float(0x7f800000u), hi = bits_to_float(kNegInfBits);
  for (int j = 0; j < group; ++j) lo = y[j] < lo ? y[j] : lo, hi = y[j] > hi ? y[j] : hi;
  uint16_t m = half_round_down(lo);
  uint16_t d = half_round_up((hi - half_to_float(m)) / 15.0f);
  float best = kv_q4_codes(y, group, half_to_float(m), half_to_float(d), best_codes);
  const float range = hi - lo;
  for (int c = 0; c < kCandidates && range > 0.0f && best > 0.0f; ++c) {
    const float inv = (13.0f + mul_rn(0.1f, float(c))) / range;
    for (int j = 0; j < group; ++j) levels[j] = uint8_t(round_clamp(mul_rn(y[j] - lo, inv), 0.0f, 15.0f));
    for (int round = 0; round <= kRefits; ++round) {
      uint16_t cd, cm;
      if (!kv_q4_fit(y, levels, group, cd, cm)) break;
      const float err = kv_q4_codes(y, group, half_to_float(cm), half_to_float(cd), codes);
      bool same = true;
      for (int j = 0; j < group; ++j) same = same && codes[j] == levels[j];
      if (err < best) {
        best = err, d = cd, m = cm;
        for (int j = 0; j < group; ++j) best_codes[j] = codes[j];
      }
      if (same) break;
      for (int j = 0; j < group; ++j) levels[j] = codes[j];
    }
  }
  put_u16(dm, d);
  put_u16(dm + 2, m);
  for (int j = 0; j < group / 2; ++j) packed[j] = uint8_t(best_codes[j] | (best_codes[j + group / 2] << 4));
}

// Stored (rotated) value j of an INT4 block: d * q + m.
EMBER_HD float kv_q4_stored(const uint8_t* block, int j, int group) {
  const int half = group / 2;
  const int code = j < half ? (block[4 + j] & 15) : (block[4 + j - half] >> 4);
  return mul_rn(half_at(block), float(code)) + half_at(block + 2);
}

// ---- INT4 with outliers: K f16 values, K channels, then an INT4 block ----

EMBER_HD void kv_q4o_quantize(const float* src, uint8_t* out, int group) {
  float x[64];
  bool taken[64];
  for (int j = 0; j < group; ++j) x[j] = src[j], taken[j] = false;
  for (int k = 0; k < kKvOutliers; ++k) {
    int best = -1;
    for (int j = 0; j < group; ++j)
      if (!taken[j] && (best < 0 || abs_f(x[j]) > abs_f(x[best]))) best = j;
    taken[best] = true;
    const uint16_t v = float_to_half(x[best]);
    put_u16(out + 2 * k, v);
    out[2 * kKvOutliers + k] = uint8_t(best);
    x[best] -= half_to_float(v);
  }
  kv_q4_quantize(x, out + 3 * kKvOutliers, out + 3 * kKvOutliers + 4, group);
}

// Adds the outliers' terms to the stored values y[0, G) of a block, in order k = 0, 1.
EMBER_HD void kv_q4o_add_outliers(const uint8_t* block, float* y, int group) {
  for (int k = 0; k < kKvOutliers; ++k) {
    const int i = block[2 * kKvOutliers + k];
    float a = mul_rn(kv_norm(group), half_at(block + 2 * k));
    if (group == 64 && ((kKvSigns >> i) & 1)) a = -a;
    for (int j = 0; j < group; ++j) y[j] = (popcount(unsigned(i & j)) & 1) ? y[j] - a : y[j] + a;
  }
}

}  // namespace ember::cuda::dev
