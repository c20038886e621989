// IEEE half (binary16) and bfloat16 conversions, bit exact, no hardware needed. Shared
// with the CUDA kernels (EMBER_HD: host and device alike, cuda/device/).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/hd.hpp"

namespace ember {

EMBER_HD float bits_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}
EMBER_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
#endif
}

// binary16 -> binary32, exact for every input (subnormals, inf, NaN).
EMBER_HD float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    if (mantissa == 0) return bits_to_float(sign);
    // Subnormal: value = mantissa * 2^-24.
    float value = float(mantissa) * (1.0f / 16777216.0f);
    return sign ? -value : value;
  }
  if (exponent == 31) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));
  return bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// binary32 -> binary16 with round-to-nearest-even; overflow gives inf, NaN stays NaN.
EMBER_HD uint16_t fp32_to_fp16(float f) {
  const uint32_t bits = float_to_bits(f);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero) in half: scale so that the integer part is the mantissa.
    if (abs < 0x33000000u) return uint16_t(sign);  // below half of the smallest subnormal
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // moves the 24-bit mantissa onto the 2^-24 grid
    // Round to nearest even on the bits shifted out.
    const uint32_t rem = mantissa & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    uint32_t value = mantissa >> shift;
    if (rem > half || (rem == half && (value & 1u))) ++value;
    return uint16_t(sign | value);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even at bit 13
  return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
}

EMBER_HD float bf16_to_fp32(uint16_t b) { return bits_to_float(uint32_t(b) << 16); }

// binary32 -> bfloat16, round-to-nearest-even; NaN stays a quiet NaN.
EMBER_HD uint16_t fp32_to_bf16(float f) {
  const uint32_t bits = float_to_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);
  return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace ember
