// AVX2 kernels of Q4_G128 and Q4_G64 weights (x = d * q + m per group of G values,
// lib/quant/q4_g.cpp) with Q8_1 activations. One step is one group: its G / 32 code runs
// are multiplied with the activation sub-blocks into one float vector (each scaled by
// its activation scale), which the group's d then scales once, and the offsets add
// m * (sum of the activation sums). Batches, and one token on weights repacked at load,
// take Q4_1's 8-row kernels (rows8_32.hpp) with the group's d and m for each sub-block.
#include "cpu/kernels/avx2/blocks32.hpp"
#include "cpu/kernels/avx2/rows8_32.hpp"
#include "cpu/kernels/tile.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

template <int G>
struct StepQ4G {
  static constexpr int kStep = G;
  static constexpr int kSub = G / quant::kQK;
  static constexpr size_t kBlockBytes = 4 + G / 2;

  struct Act {
    __m256i y[kSub];
    float d[kSub];
    float s;  // sum of the sub-blocks' fp16 sums
  };
  struct Wt {
    __m256i q[kSub];
    float d, m;
  };
  using Acc = AccMin;

  static Acc zero() { return {_mm256_setzero_ps(), 0.0f}; }
  static Act load_act(const std::byte* a, int64_t s) {
    Act act;
    act.s = 0.0f;
    for (int j = 0; j < kSub; ++j) {
      const ActQ8_1 sub = ActQ8_1::load(a, s * kSub + j);
      act.y[j] = sub.y;
      act.d[j] = sub.d;
      act.s += sub.s;
    }
    return act;
  }
  static Wt load_w(const std::byte* w, int64_t s) {
    const std::byte* b = w + size_t(s) * kBlockBytes;
    Wt wt;
    for (int j = 0; j < kSub; ++j) wt.q[j] = nibbles_32(b + 4 + 16 * j);
    wt.d = half_at(b);
    wt.m = half_at(b + 2);
    return wt;
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    __m256 group = _mm256_setzero_ps();
    for (int j = 0; j < kSub; ++j) {
      const __m256i sum = dot4_add(_mm256_setzero_si256(), w.q[j], a.y[j]);
      group = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(a.d[j]), group);
    }
    acc.v = _mm256_fmadd_ps(group, _mm256_set1_ps(w.d), acc.v);
    acc.m += w.m * a.s;
  }
  static float reduce(const Acc& acc) { return hsum(acc.v) + acc.m; }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

template <int G>
void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t g = 0; g < n / G; ++g, p += StepQ4G<G>::kBlockBytes)
    for (int j = 0; j < G / quant::kQK; ++j)
      store_offset(dst + g * G + j * quant::kQK, nibbles_32(p + 4 + 16 * j), half_at(p), half_at(p + 2));
}

template <int G>
struct Rows8 {
  static constexpr size_t kBlockBytes = StepQ4G<G>::kBlockBytes;
  static constexpr size_t kCodes = 4, kHigh = 0;
  static constexpr int kBits = 4, kOffset = 0, kSub = G / quant::kQK;
  static constexpr bool kMin = true;
};

constexpr int kTileW = 2, kTileX = 2;

template <quant::DType T, int G>
constexpr WeightKernels kernels() {
  using Step = StepQ4G<G>;
  constexpr DotTileFn kPlain = dot_tile<Step, kTileW, kTileX>;
  return {T,       quant::DType::q8_1, quantize_q8_1, dot<Step>, dot_tile_rows8_32<Rows8<G>, kPlain>, dequantize<G>,
          kRows8,  4,                  {},            nullptr,   {},
          kPlain,  {dot_tile_rows8_32_repacked<Rows8<G>>, 4}};
}

}  // namespace

extern const WeightKernels kQ4_G128 = kernels<quant::DType::q4_g128, 128>();
extern const WeightKernels kQ4_G64 = kernels<quant::DType::q4_g64, 64>();

}  // namespace ember::cpu::EMBER_AVX2_NS
