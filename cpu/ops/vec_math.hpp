// Branch-free float math that GCC vectorizes inside the loops of cpu/ops/levels/loops.cpp,
// which is compiled once per ISA level. Accuracy is stated per function.
//
// Internal linkage: this header is compiled with several levels' flags (and GCC contracts
// a * b + c into an FMA where the level has one), so each translation unit must keep
// its own copies rather than share one the linker picked.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/fp16.hpp"

namespace ember::cpu {
namespace {

// e^x for x in float range, relative error below 3e-7 (degree-6 polynomial after
// reducing x = k ln2 + r, |r| <= ln2/2). Inputs below -87 flush to ~0, above 88 saturate.
inline float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float kf = (x * kLog2e + kRound) - kRound;
  const float r = (x - kf * 0.693145751953125f) - kf * 1.428606765330187045e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t k = int32_t(kf);
  const uint32_t bits = uint32_t(k + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// tanh through exp: tanh(x) = 1 - 2 / (e^{2x} + 1); absolute error below 1e-6.
inline float tanh_approx(float x) { return 1.0f - 2.0f / (exp_approx(2.0f * x) + 1.0f); }

inline float silu_approx(float x) { return x / (1.0f + exp_approx(-x)); }

// 0.5 x (1 + tanh(y)) rewritten as x / (1 + e^{-2y}), which avoids the cancellation
// of 1 + tanh(y) for negative y; relative error below 1e-6.
inline float gelu_tanh_approx(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  const float y = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  return x / (1.0f + exp_approx(-2.0f * y));
}

// e^x with the algorithm of llama.cpp's vector code (ggml_v_expf, after ARM's
// optimized-routines expf): x = n ln2 + b with n = round(x / ln2) and ln2 split in
// two, e^b by a degree-5 polynomial in FMA form, then scaled by 2^n. Maximum error
// ~1.5 ulp. Bit for bit the values llama.cpp's AVX2 and AVX-512 softmax and SiLU
// use, so ember's results can agree with llama.cpp's exactly; needs hardware FMA to
// be fast (std::fma is a library call in code compiled without FMA). Below about -104 it
// returns 0, above 88.7 inf.
inline float exp_fma(float x) {
  constexpr float kShift = 0x1.8p23f;  // adding it rounds to an integer
  const float z = std::fma(x, 0x1.715476p+0f, kShift);
  const float n = z - kShift;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  // j * 2^n in two exact steps (2^n alone may not be a float for n < -126).
  // n clamped to [-200, 200], NaN to -200 (n may be +-inf or NaN). Comparisons, each
  // evaluated unconditionally, and selects: std::fmin/fmax are library calls without
  // -ffinite-math-only, and a comparison evaluated only on one branch may trap (GCC's
  // default -ftrapping-math), either of which kept the loops calling this
  // (OpKernels::exp_row, silu_glu_row) from being vectorized.
  const bool below = !(n >= -200.0f), above = n > 200.0f;
  const auto k = int32_t(above ? 200.0f : (below ? -200.0f : n));
  const int32_t k1 = k / 2, k2 = k - k1;
  const float s1 = bits_to_float(uint32_t(std::max(k1 + 127, 1)) << 23);
  const float s2 = bits_to_float(uint32_t(std::max(std::min(k2 + 127, 254), 1)) << 23);
  const float res = j * s1 * s2;
  const bool underflow = n < -192.0f, overflow = n > 192.0f;
  return underflow ? 0.0f : (overflow ? std::numeric_limits<float>::infinity() : res);
}

// x * sigmoid(x) as llama.cpp's vector SiLU computes it: x / (1 + e^-x) with exp_fma.
inline float silu_fma(float x) { return x / (1.0f + exp_fma(0.0f - x)); }

}  // namespace
}  // namespace ember::cpu
