// ARM64 kernels of Q4_G128 and Q4_G64 weights (x = d * q + m per group of G values,
// lib/quant/q4_g.cpp) with Q8_1 activations, in the x86 levels' design
// (kernels/avx2/q4_g.cpp): one step is one group; its G / 32 code runs are multiplied
// with the activation sub-blocks (dot4: SDOT at the dotprod and i8mm levels) into one
// float vector, each scaled by its activation scale, which the group's d then scales
// once, and the offsets add m * (the sum of the sub-blocks' activation sums). At the
// i8mm level batches take pairs of rows x pairs of tokens with SMMLA (mmla.hpp), each
// sub-block's four integer dot products scaled by the two tokens' activation scales.
#include "cpu/kernels/neon/blocks32.hpp"
#include "cpu/kernels/neon/mmla.hpp"
#include "cpu/kernels/neon/rows8.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

template <int G>
struct GroupQ4G {
  static constexpr int kSub = G / quant::kQK;
  static constexpr size_t kBlockBytes = 4 + G / 2;
  // Codes of sub-block j of group s (0..15, as int8) and the group's d and m.
  static void load(const std::byte* row, int64_t s, int8x16_t (&q)[kSub][2], float& d, float& m) {
    const std::byte* b = row + size_t(s) * kBlockBytes;
    for (int j = 0; j < kSub; ++j) {
      uint8x16_t lo, hi;
      nibbles_32(b + 4 + 16 * j, lo, hi);
      q[j][0] = vreinterpretq_s8_u8(lo);
      q[j][1] = vreinterpretq_s8_u8(hi);
    }
    d = half_at(b);
    m = half_at(b + 2);
  }
};

template <int G>
struct StepQ4G {
  static constexpr int kStep = G;
  static constexpr int kSub = G / quant::kQK;
  struct Act {
    int8x16_t y[kSub][2];
    float d[kSub];
    float s;  // sum of the sub-blocks' fp16 sums
  };
  struct Wt {
    int8x16_t q[kSub][2];
    float d, m;
  };
  using Acc = AccMin;
  static Acc zero() { return {vdupq_n_f32(0.0f), 0.0f}; }
  static Act load_act(const std::byte* a, int64_t s) {
    Act act;
    act.s = 0.0f;
    for (int j = 0; j < kSub; ++j) {
      const ActQ8_1 sub = ActQ8_1::load(a, s * kSub + j);
      act.y[j][0] = sub.y0;
      act.y[j][1] = sub.y1;
      act.d[j] = sub.d;
      act.s += sub.s;
    }
    return act;
  }
  static Wt load_w(const std::byte* w, int64_t s) {
    Wt wt;
    GroupQ4G<G>::load(w, s, wt.q, wt.d, wt.m);
    return wt;
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    float32x4_t group = vdupq_n_f32(0.0f);
    for (int j = 0; j < kSub; ++j) {
      const int32x4_t sum = dot4(dot4(vdupq_n_s32(0), w.q[j][0], a.y[j][0]), w.q[j][1], a.y[j][1]);
      group = vfmaq_f32(group, vcvtq_f32_s32(sum), vdupq_n_f32(a.d[j]));
    }
    acc.v = vfmaq_f32(acc.v, group, vdupq_n_f32(w.d));
    acc.m += w.m * a.s;
  }
  static float reduce(const Acc& acc) { return vaddvq_f32(acc.v) + acc.m; }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

#if defined(__ARM_FEATURE_MATMUL_INT8)
// Pairs of rows x pairs of tokens: lanes [row0.tok0, row0.tok1, row1.tok0, row1.tok1].
template <int G>
struct MmlaQ4G {
  static constexpr int kStep = G;
  static constexpr int kSub = G / quant::kQK;
  struct Act {
    Pair32 y[kSub];
    float32x4_t d[kSub];   // per_token
    float32x4_t s;         // per_token: the group's activation sums
  };
  struct Wt {
    Pair32 q[kSub];
    float32x4_t d, m;      // per_row
  };
  struct Acc {
    float32x4_t v, m;
  };
  static Acc zero() { return {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; }
  static Act load_act(const std::byte* a, size_t row_bytes, int64_t s) {
    Act act;
    float s0 = 0.0f, s1 = 0.0f;
    for (int j = 0; j < kSub; ++j) {
      const ActQ8_1 t0 = ActQ8_1::load(a, s * kSub + j), t1 = ActQ8_1::load(a + row_bytes, s * kSub + j);
      act.y[j] = interleave(t0.y0, t0.y1, t1.y0, t1.y1);
      act.d[j] = per_token(t0.d, t1.d);
      s0 += t0.s;
      s1 += t1.s;
    }
    act.s = per_token(s0, s1);
    return act;
  }
  static Wt load_w(const std::byte* w, size_t row_bytes, int64_t s) {
    int8x16_t q0[kSub][2], q1[kSub][2];
    float d0, m0, d1, m1;
    GroupQ4G<G>::load(w, s, q0, d0, m0);
    GroupQ4G<G>::load(w + row_bytes, s, q1, d1, m1);
    Wt wt;
    for (int j = 0; j < kSub; ++j) wt.q[j] = interleave(q0[j][0], q0[j][1], q1[j][0], q1[j][1]);
    wt.d = per_row(d0, d1);
    wt.m = per_row(m0, m1);
    return wt;
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    float32x4_t group = vdupq_n_f32(0.0f);
    for (int j = 0; j < kSub; ++j) group = vfmaq_f32(group, vcvtq_f32_s32(mmla32(w.q[j], a.y[j])), a.d[j]);
    acc.v = vfmaq_f32(acc.v, group, w.d);
    acc.m = vfmaq_f32(acc.m, w.m, a.s);
  }
  static float32x4_t finish(const Acc& acc) { return vaddq_f32(acc.v, acc.m); }
};
#else
template <int G>
struct MmlaQ4G {};
#endif

// The rows8 layout's format description (rows8.hpp): one block is one group.
template <int G>
struct Rows8 {
  static constexpr size_t kBlockBytes = GroupQ4G<G>::kBlockBytes;
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0, kSub = G / quant::kQK, kBits = 4;
};

template <int G>
void dequantize(const void* src, float* dst, int64_t n) {
  if constexpr (G == 128) quant::ref::dequantize_q4_g128(src, dst, n);
  else quant::ref::dequantize_q4_g64(src, dst, n);
}

constexpr int kTileW = 4, kTileX = 2;

template <quant::DType T, int G>
constexpr WeightKernels kernels() {
  return {T,      quant::DType::q8_1, quantize_q8_1, dot<StepQ4G<G>>,
          dot_tile_mmla<StepQ4G<G>, MmlaQ4G<G>, kTileW, kTileX>, dequantize<G>, kTileW, kTileX, {}, nullptr, {},
          dot_tile<StepQ4G<G>, kTileW, kTileX>, rows8_repacked<Rows8<G>>()};
}

}  // namespace

extern const WeightKernels kQ4_G128 = kernels<quant::DType::q4_g128, 128>();
extern const WeightKernels kQ4_G64 = kernels<quant::DType::q4_g64, 64>();

}  // namespace ember::cpu::EMBER_NEON_NS
