#include "sampling/exp.hpp"

#include <cstdint>
#include <cstring>

// Contraction of a * b + c into one fused multiply-add changes the rounding, so it
// would make results depend on the target CPU. GCC contracts by default, even in
// ISO mode; Clang within expressions; MSVC not under /fp:precise. GCC also needs
// no-trapping-math to vectorise the selects; it changes no result.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off", "no-trapping-math")
#endif

namespace ember::sampling {

namespace {

constexpr float kLog2e = 1.44269504088896341f;
// ln 2 = kLn2High + kLn2Low; kLn2High has 9 significant bits, so k * kLn2High is
// exact for |k| <= 2^15.
constexpr float kLn2High = 0.693359375f;
constexpr float kLn2Low = -2.12194440e-4f;
// Adding then subtracting 1.5 * 2^23 rounds a float of magnitude < 2^22 to the
// nearest integer (ties to even) in the default rounding mode.
constexpr float kRoundShift = 12582912.0f;
// 1/n! for n = 2..7.
constexpr float kC2 = 1.0f / 2.0f;
constexpr float kC3 = 1.0f / 6.0f;
constexpr float kC4 = 1.0f / 24.0f;
constexpr float kC5 = 1.0f / 120.0f;
constexpr float kC6 = 1.0f / 720.0f;
constexpr float kC7 = 1.0f / 5040.0f;

// Shared by both entry points. Every operation is a separate IEEE float operation
// (no contraction in this file).
inline float exp_kernel(float x) {
  // Written as two selects on the same comparison so that compilers vectorise it;
  // -inf takes the underflow path.
  const float clamped = x < kExpCutoff ? kExpCutoff : x;
  const float shifted = clamped * kLog2e + kRoundShift;
  const float k = shifted - kRoundShift;  // round(x / ln2), in [-116, 0]
  const float r = (clamped - k * kLn2High) - k * kLn2Low;
  float poly = kC7;
  poly = poly * r + kC6;
  poly = poly * r + kC5;
  poly = poly * r + kC4;
  poly = poly * r + kC3;
  poly = poly * r + kC2;
  poly = poly * r + 1.0f;
  poly = poly * r + 1.0f;
  // 2^k as a float: biased exponent k + 127 in bits 23..30 (k >= -116: normal).
  const int32_t exponent = static_cast<int32_t>(k) + 127;
  const uint32_t bits = static_cast<uint32_t>(exponent) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const float result = poly * scale;
  return x < kExpCutoff ? 0.0f : result;
}

}  // namespace

float exp_nonpositive(float x) { return exp_kernel(x); }

void exp_nonpositive(std::span<float> values) {
  float* data = values.data();
  const size_t n = values.size();
  for (size_t i = 0; i < n; ++i) data[i] = exp_kernel(data[i]);
}

}  // namespace ember::sampling
