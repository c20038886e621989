// ARM64 kernels of Q4_K weights with Q8_K activations (see blocks256.hpp).
#include <cmath>

#include "cpu/kernels/neon/blocks256.hpp"
#include "cpu/kernels/neon/mmla.hpp"
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

#if defined(__ARM_FEATURE_MATMUL_INT8)
// The i8mm level's batch step, 2 weight rows x 2 tokens (mmla.hpp): SMMLA gives each
// sub-block's four integer dot products [r0.t0, r0.t1, r1.t0, r1.t1], which are scaled
// and summed in int32 as scaled_sums does. The integer sums are exact, so each (row,
// token) gets the integer Step gets, and the same two fmas per super-block: Step's bits.
struct MmlaQ4K {
  static constexpr int kStep = quant::kQKK;
  struct Act {
    const std::byte* qs[2];
    int16x8_t bsum_pairs[2];
    float32x4_t d;  // per_token
  };
  struct Wt {
    const std::byte* qs[2];
    int32_t sc[2][8];
    int16x8_t mn[2];
    float32x4_t d, dmin;  // per_row
  };
  struct Acc {
    float32x4_t acc, min;
  };
  static Acc zero() { return {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; }
  static Act load_act(const std::byte* a, size_t row_bytes, int64_t s) {
    const ActQ8_K t0 = ActQ8_K::load(a, s), t1 = ActQ8_K::load(a + row_bytes, s);
    return {{t0.qs, t1.qs}, {t0.bsum_pairs, t1.bsum_pairs}, per_token(t0.d, t1.d)};
  }
  static Wt load_w(const std::byte* w, size_t row_bytes, int64_t s) {
    Wt r;
    float d[2], dmin[2];
    for (int i = 0; i < 2; ++i) {
      const std::byte* b = w + size_t(i) * row_bytes + size_t(s) * sizeof(quant::BlockQ4_K);
      d[i] = half_at(b);
      dmin[i] = half_at(b + 2);
      const quant::KScales k = quant::unpack_k_scales(reinterpret_cast<const uint8_t*>(b + 4));
      for (int j = 0; j < 8; ++j) r.sc[i][j] = k.sc[j];
      r.mn[i] = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(k.mn)));
      r.qs[i] = b + offsetof(quant::BlockQ4_K, qs);
    }
    r.d = per_row(d[0], d[1]);
    r.dmin = per_row(dmin[0], dmin[1]);
    return r;
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    int32x4_t sum = vdupq_n_s32(0);
    for (int j = 0; j < 8; ++j) {
      // Sub-block j: the low (even j) or high (odd j) nibbles of 32-byte group j / 2.
      int8x16_t c[2][2];
      for (int i = 0; i < 2; ++i)
        for (int h = 0; h < 2; ++h) {
          const uint8x16_t v = load_u8(w.qs[i] + 32 * (j / 2) + 16 * h);
          c[i][h] = vreinterpretq_s8_u8(j % 2 == 0 ? vandq_u8(v, vdupq_n_u8(0x0f)) : vshrq_n_u8(v, 4));
        }
      const Pair32 wq = interleave(c[0][0], c[0][1], c[1][0], c[1][1]);
      const Pair32 aq = interleave(load_s8(a.qs[0] + 32 * j), load_s8(a.qs[0] + 32 * j + 16),
                                   load_s8(a.qs[1] + 32 * j), load_s8(a.qs[1] + 32 * j + 16));
      const int32x4_t scale = {w.sc[0][j], w.sc[0][j], w.sc[1][j], w.sc[1][j]};
      sum = vmlaq_s32(sum, mmla32(wq, aq), scale);
    }
    // mn[j] * (bsums[2j] + bsums[2j + 1]) summed over j, per (row, token), as min_terms.
    int32_t mins[4];
    for (int i = 0; i < 2; ++i)
      for (int t = 0; t < 2; ++t)
        mins[2 * i + t] = vaddvq_s32(vaddq_s32(vmull_s16(vget_low_s16(w.mn[i]), vget_low_s16(a.bsum_pairs[t])),
                                               vmull_high_s16(w.mn[i], a.bsum_pairs[t])));
    acc.acc = vfmaq_f32(acc.acc, vcvtq_f32_s32(sum), vmulq_f32(w.d, a.d));
    acc.min = vfmaq_f32(acc.min, vcvtq_f32_s32(vld1q_s32(mins)), vmulq_f32(w.dmin, a.d));
  }
  static float32x4_t finish(const Acc& acc) { return vsubq_f32(acc.acc, acc.min); }
};
#endif

constexpr int kTileW = 2, kTileX = 2;

// WeightKernels::dot_tile: at the i8mm level SMMLA pairs for several tokens, else (and
// below it) dot_tile_lanes. Every path gives Step's bits.
void dot_tile_q4_k(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                   int n_x, float* out, size_t out_stride, int64_t n) {
#if defined(__ARM_FEATURE_MATMUL_INT8)
  if (n_x >= 2)
    return dot_tile_mmla<Step, MmlaQ4K, kTileW, kTileX>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x,
                                                         out, out_stride, n);
#endif
  dot_tile_lanes<Step, kTileW, kTileX>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n);
}

}  // namespace

extern const WeightKernels kQ4_K = {quant::DType::q4_k, quant::DType::q8_k, quantize_q8_k, dot<Step>,
                                    dot_tile_q4_k, quant::ref::dequantize_q4_k, kTileW,
                                    kTileX, {}, dot_tile_lanes<StepGrouped, kTileW, kTileX>};

}  // namespace ember::cpu::EMBER_NEON_NS
