// Shared helpers of the quant / CPU kernel tests: seeded data and tolerances.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "quant/dtype.hpp"
#include "quant/quant.hpp"

namespace ember::test {

// Values with a spread of magnitudes: normal(0, 1) scaled per 32-value group by
// 2^uniform(-3, 3), so scales differ from block to block as in real tensors.
inline std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-3.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(n));
  float scale = 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 32 == 0) scale = std::exp2(exponent(rng));
    v[size_t(i)] = normal(rng) * scale;
  }
  return v;
}

// A row quantized with lib/quant's reference quantizer.
inline std::vector<std::byte> quantize(quant::DType type, const std::vector<float>& x) {
  std::vector<std::byte> out(quant::row_bytes(type, int64_t(x.size())));
  quant::quantize_row(type, x.data(), out.data(), int64_t(x.size()));
  return out;
}

inline std::vector<float> dequantize(quant::DType type, const std::byte* row, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  quant::dequantize_row(type, row, out.data(), n);
  return out;
}

// Scale of a dot product's summation error: sum |a_i| * max |w_j| over dequantized
// weights w and dequantized activations a. It bounds every partial sum a kernel
// forms, including the separate scale and min terms of the offset formats.
inline double dot_magnitude(quant::DType weight_type, const std::byte* w, const std::byte* a, int64_t n) {
  const std::vector<float> wf = dequantize(weight_type, w, n);
  const std::vector<float> af = dequantize(quant::activation_type(weight_type), a, n);
  double wmax = 0.0, asum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    wmax = std::max(wmax, double(std::fabs(wf[size_t(i)])));
    asum += std::fabs(af[size_t(i)]);
  }
  return wmax * asum;
}

// Relative tolerance (of dot_magnitude) between kernels that differ only in the
// order of float additions: 128 block terms summed in float in any order stay
// within ~1e-6; 1e-5 leaves margin and still catches any wrong code or scale
// (one code off by one changes a sum by ~1e-3 of its magnitude or more).
inline constexpr double kSummationTolerance = 1e-5;

// The weight types with kernels, and row lengths to test for each.
inline std::vector<int64_t> test_lengths(quant::DType type) {
  const int block = int(quant::type_info(type).block_elems);
  if (block == 1) return {1, 7, 16, 33, 256, 1000, 4096};
  if (block == 32) return {32, 64, 96, 256, 1024, 4096};
  if (block == 256) return {256, 512, 1024, 4096};
  return {block, 2 * int64_t(block), 3 * int64_t(block), 640, 4096};  // groups of 64 or 128
}

}  // namespace ember::test
