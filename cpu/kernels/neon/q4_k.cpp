// ARM64 kernels of Q4_K weights with Q8_K activations (see blocks256.hpp).
#include <cmath>

#include "cpu/kernels/neon/blocks256.hpp"
#include "cpu/kernels/neon/mmla.hpp"
#include "cpu/kernels/neon/rows8_k.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

// llama.cpp's order (quant/lanes.hpp): two scalar accumulators per dot product,
// updated once per super-block (Step) or once per 64 values (StepGrouped). The
// integer sums inside are exact, so any grouping of them gives the same bits.
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
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    int32x4_t lo, hi;
    min_terms(w, a, lo, hi);
    acc.acc = std::fma(float(vaddvq_s32(scaled_sums(w, a, 0, 8))), w.d * a.d, acc.acc);
    acc.min = std::fma(float(vaddvq_s32(vaddq_s32(lo, hi))), w.dmin * a.d, acc.min);
  }
  static float reduce(const Acc& acc) { return acc.acc - acc.min; }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

struct StepGrouped : Step {
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    int32x4_t lo, hi;
    min_terms(w, a, lo, hi);
    // mins[p]: sub-blocks 2p and 2p + 1 (neighbouring lanes of lo, then of hi).
    int32_t mins[4];
    vst1q_s32(mins, vpaddq_s32(lo, hi));
    const float d = w.d * a.d, dmin = w.dmin * a.d;
    for (int p = 0; p < 4; ++p) {
      acc.acc = std::fma(float(vaddvq_s32(scaled_sums(w, a, 2 * p, 2 * p + 2))), d, acc.acc);
      acc.min = std::fma(float(mins[p]), dmin, acc.min);
    }
  }
};

// The 32 codes of sub-block j (low nibbles of 32-byte group j / 2 for even j, high ones
// for odd j), for the SMMLA tiles (mmla.hpp).
struct Q4KCodes {
  using Block = quant::BlockQ4_K;
  static void codes(const std::byte* block, int j, int8x16_t c[2]) {
    for (int h = 0; h < 2; ++h) {
      const uint8x16_t v = load_u8(block + offsetof(quant::BlockQ4_K, qs) + 32 * (j / 2) + 16 * h);
      c[h] = vreinterpretq_s8_u8(j % 2 == 0 ? vandq_u8(v, vdupq_n_u8(0x0f)) : vshrq_n_u8(v, 4));
    }
  }
};

constexpr int kTileW = 2, kTileX = 2;

// WeightKernels::dot_tile: at the i8mm level SMMLA pairs of rows x pairs of tokens
// (MmlaKOffset, whose integer sums are exact: Step's bits), for one token and below
// the i8mm level dot_tile_lanes. Every path gives Step's bits.
void dot_tile_q4_k(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                   int n_x, float* out, size_t out_stride, int64_t n) {
#if defined(__ARM_FEATURE_MATMUL_INT8)
  if (n_x >= 2)
    return dot_tile_mmla<Step, MmlaKOffset<Q4KCodes>, kTileW, kTileX>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x,
                                                         out, out_stride, n);
#endif
  dot_tile_lanes<Step, kTileW, kTileX>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n);
}

}  // namespace

extern const WeightKernels kQ4_K = {quant::DType::q4_k, quant::DType::q8_k, quantize_q8_k, dot<Step>,
                                    dot_tile_q4_k, quant::ref::dequantize_q4_k, kTileW,
                                    kTileX, {}, dot_tile_lanes<StepGrouped, kTileW, kTileX>, {}, nullptr,
                                    rows8_k_repacked<4>()};

}  // namespace ember::cpu::EMBER_NEON_NS
