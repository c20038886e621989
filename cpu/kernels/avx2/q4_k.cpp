// AVX2 kernels of Q4_K weights with Q8_K activations (see blocks256.hpp).
#include <cmath>

#include "cpu/kernels/avx2/blocks256.hpp"
#include "cpu/kernels/avx2/rows8_k.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

// llama.cpp's order (quant/lanes.hpp): two scalar accumulators per dot product,
// updated once per super-block (Step) or once per 64 values (StepGrouped).
struct AccQ4K {
  float acc, min;
};

struct Step {
  static constexpr int kStep = quant::kQKK;
  using Act = ActQ8_K;
  using Wt = WtKOffset;
  using Acc = AccQ4K;
  static Acc zero() { return {0.0f, 0.0f}; }
  static Act load_act(const std::byte* a, int64_t s) { return ActQ8_K::load(a, s); }
  static Wt load_w(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ4_K);
    Wt w;
    load_k_offset_scales(b, w);
    load_k_nibbles(b + offsetof(quant::BlockQ4_K, qs), w);
    return w;
  }
  // sc[j] * dot of sub-block j, as int32 lanes.
  static __m256i sub_block(const Wt& w, const Act& a, int j) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w.q[j], a.codes(j)), scale_of(w.sc, j));
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    __m256i sum = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) sum = _mm256_add_epi32(sum, sub_block(w, a, j));
    // Lane j: mn[j] * (bsums[2j] + bsums[2j + 1]).
    const __m256i mins = _mm256_madd_epi16(a.bsums, w.mn);
    acc.acc = std::fma(float(hsum_i32(sum)), w.d * a.d, acc.acc);
    acc.min = std::fma(float(hsum_i32(mins)), w.dmin * a.d, acc.min);
  }
  static float reduce(const Acc& acc) { return acc.acc - acc.min; }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

struct StepGrouped : Step {
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    alignas(32) int32_t mins[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(mins), _mm256_madd_epi16(a.bsums, w.mn));
    const float d = w.d * a.d, dmin = w.dmin * a.d;
    for (int p = 0; p < 4; ++p) {
      const int32_t isum = hsum_i32(_mm256_add_epi32(sub_block(w, a, 2 * p), sub_block(w, a, 2 * p + 1)));
      acc.acc = std::fma(float(isum), d, acc.acc);
      acc.min = std::fma(float(mins[2 * p] + mins[2 * p + 1]), dmin, acc.min);
    }
  }
};

// Batches: rows8_k.hpp in either order, the step kernels for the rest.
struct Q4KRows8 {
  using Block = quant::BlockQ4_K;
  static constexpr int kBits = 4;
};
constexpr DotTileFn kPlain = dot_tile_lanes<Step, 2, 2>, kGroupedPlain = dot_tile_lanes<StepGrouped, 2, 2>;

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t b = 0; b < n / quant::kQKK; ++b, p += sizeof(quant::BlockQ4_K)) {
    const auto& blk = *reinterpret_cast<const quant::BlockQ4_K*>(p);
    const float d = half(blk.d), dmin = half(blk.dmin);
    const quant::KScales s = quant::unpack_k_scales(blk.scales);
    WtKOffset w;
    load_k_nibbles(p + offsetof(quant::BlockQ4_K, qs), w);
    for (int j = 0; j < 8; ++j)
      store_sub_block(dst + b * quant::kQKK + 32 * j, w.q[j], d * float(s.sc[j]), dmin * float(s.mn[j]));
  }
}

constexpr int kTileW = kRows8, kTileX = 4;

}  // namespace

extern const WeightKernels kQ4_K = {quant::DType::q4_k, quant::DType::q8_k, quantize_q8_k, dot<Step>,
                                    dot_tile_rows8_k<Q4KRows8, false, kPlain>, dequantize, kTileW, kTileX, {},
                                    dot_tile_rows8_k<Q4KRows8, true, kGroupedPlain>, {}, nullptr,
                                    {dot_tile_rows8_k_repacked<Q4KRows8, false>, 4,
                                     dot_tile_rows8_k_repacked<Q4KRows8, true>}};

}  // namespace ember::cpu::EMBER_AVX2_NS
