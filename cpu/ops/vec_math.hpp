// Branch-free float math that GCC vectorizes inside the target_clones functions
// of cpu/ops (EMBER_VECTORIZE). Accuracy is stated per function.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(EMBER_X86) && defined(__GNUC__) && !defined(__clang__)
// One clone per ISA level, chosen by the dynamic loader from the running CPU.
#define EMBER_VECTORIZE __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define EMBER_VECTORIZE
#endif

namespace ember::cpu {

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

}  // namespace ember::cpu
