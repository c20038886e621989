// AVX-512 step kernels in llama.cpp's summation order (quant/lanes.hpp) for Q8_0 and
// Q5_0 weights with Q8_0 activations (Q4_K and Q6_K have theirs in q4_k.cpp, q6_k.cpp). Every float
// operation is the one lib/quant's reference performs, in the same order, so the
// results are bit-identical to it and to llama.cpp's x86 kernels on the same codes.
// The integer parts use VNNI and may be grouped freely (integer sums are exact).
#pragma once

#include <cmath>

#include "cpu/kernels/avx512/blocks32.hpp"

namespace ember::cpu::avx512 {
namespace {

// ggml's hsum_float_8: upper half onto lower, lanes 2-3 onto 0-1, lane 1 onto 0.
inline float hsum8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// ---- 32-value blocks: one block per step, eight lanes of four values ----

// Activation block (Q8_0) for weights whose unsigned codes carry offset kOffset.
template <int kOffset>
struct ActLanes32 {
  __m256i y;     // 32 codes
  __m256i bias;  // -kOffset * (sum of the lane's 4 codes)
  float d;

  static ActLanes32 load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ8_0);
    ActLanes32 a;
    a.y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
    const __m256i sum4 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), a.y);
    a.bias = _mm256_mullo_epi32(sum4, _mm256_set1_epi32(-kOffset));
    a.d = _cvtsh_ss(load_u16(b));
    return a;
  }
};

struct WtLanes32 {
  __m256i q;  // unsigned codes in value order
  float d;
};

// W: kOffset and load(row, block) -> WtLanes32.
template <class W>
struct StepLanes32 {
  static constexpr int kStep = quant::kQK;
  using Act = ActLanes32<W::kOffset>;
  using Wt = WtLanes32;
  using Acc = __m256;
  static Acc zero() { return _mm256_setzero_ps(); }
  static Act load_act(const std::byte* a, int64_t s) { return Act::load(a, s); }
  static Wt load_w(const std::byte* w, int64_t s) { return W::load(w, s); }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    const __m256i sum = _mm256_dpbusd_epi32(a.bias, w.q, a.y);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(w.d * a.d), _mm256_cvtepi32_ps(sum), acc);
  }
  static float reduce(const Acc& acc) { return hsum8(acc); }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }  // n % 32 == 0
};

}  // namespace
}  // namespace ember::cpu::avx512
