// The ops' plain loops (OpKernels' elementwise, softmax and accumulation rows), written
// once in C++ and compiled once per level with the level's flags (cpu/CMakeLists.txt,
// EMBER_OPS_NS names the level's namespace), so that the compiler vectorizes each for
// its level and the level is the backend's choice, not the dynamic loader's.
//
// Results: element by element the same at every level (no reductions are reordered:
// GCC does not vectorize float sums without -ffast-math; std::fma is exact), except
// exp_masked, whose exp_approx the compiler contracts into FMAs where the level has
// them (AVX2, AVX-512, ARM64), so its last bits differ from the scalar level's on x86.
#include <cmath>
#include <cstdint>
#include <limits>

#include "cpu/ops/levels/levels.hpp"
#include "cpu/ops/vec_math.hpp"

#if !defined(EMBER_OPS_NS)
#error "cpu/CMakeLists.txt compiles this file once per level with EMBER_OPS_NS=<level>"
#endif

namespace ember::cpu::EMBER_OPS_NS {

void add_row(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
void mul_row(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}
void scale_row(const float* x, float factor, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * factor;
}
void silu_glu_row(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu_fma(gate[i]) * up[i];
}

void scale_weighted(const float* x, const float* w, float factor, float* out, int64_t n) {
  if (w) {
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * factor) * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * factor;
  }
}

void rotate_neox(const float* __restrict src, float* __restrict dst, const float* cs, int half) {
  for (int i = 0; i < half; ++i) {
    const float a = src[i], b = src[i + half];
    const float c = cs[2 * i], s = cs[2 * i + 1];
    // One FMA each, with the other product rounded first, as llama.cpp's compiled code.
    dst[i] = std::fma(a, c, -(b * s));
    dst[i + half] = std::fma(a, s, b * c);
  }
}
void rotate_normal(const float* __restrict src, float* __restrict dst, const float* cs, int half) {
  for (int i = 0; i < half; ++i) {
    const float a = src[2 * i], b = src[2 * i + 1];
    const float c = cs[2 * i], s = cs[2 * i + 1];
    dst[2 * i] = std::fma(a, c, -(b * s));
    dst[2 * i + 1] = std::fma(a, s, b * c);
  }
}

void reduce_lanes(float* part, int lanes, int n, float* out) {
  auto p = [&](int lane) { return part + size_t(lane) * size_t(n); };
  if (lanes == 64)
    for (int l = 0; l < 16; ++l)
      for (int d = 0; d < n; ++d) p(l)[d] = (p(l)[d] + p(32 + l)[d]) + (p(16 + l)[d] + p(48 + l)[d]);
  for (int step = 8; step >= 2; step /= 2)
    for (int l = 0; l < step; ++l)
      for (int d = 0; d < n; ++d) p(l)[d] += p(l + step)[d];
  for (int d = 0; d < n; ++d) out[d] = p(0)[d] + p(1)[d];
}

void exp_row(float* s, int64_t n, float max_score) {
  for (int64_t j = 0; j < n; ++j) s[j] = exp_fma(s[j] - max_score);
}

float exp_masked(float* s, int64_t n, float max_score) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float total = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float e = exp_approx(s[j] - max_score);
    s[j] = s[j] == kNegInf ? 0.0f : e;
    total += s[j];
  }
  return total;
}

// As exp_masked, but the sum is taken in 16 lanes (lane l: entries l, l + 16, ...) that
// are then added pairwise (l + 8, l + 4, l + 2, l + 1): a fixed order that the compiler
// vectorizes (the running sum of exp_masked keeps its loop scalar).
float exp_masked16(float* s, int64_t n, float max_score) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float lanes[16] = {};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; ++l) {
      const float x = s[j + l];
      const float e = x == kNegInf ? 0.0f : exp_approx(x - max_score);
      s[j + l] = e;
      lanes[l] += e;
    }
  for (int l = 0; j + l < n; ++l) {
    const float x = s[j + l];
    const float e = x == kNegInf ? 0.0f : exp_approx(x - max_score);
    s[j + l] = e;
    lanes[l] += e;
  }
  for (int width = 8; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  return lanes[0];
}

void add_into(float* acc, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}
void scale_by(float* x, float factor, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

}  // namespace ember::cpu::EMBER_OPS_NS
