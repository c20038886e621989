// The i8mm level's batch kernels: SMMLA (vmmlaq_s32) takes 8 codes of 2 weight rows
// and 8 codes of 2 tokens and adds the 4 dot products [row0.tok0, row0.tok1, row1.tok0,
// row1.tok1] into one register, so a register tile of pairs of weight rows x pairs of
// tokens does 2x the multiply-adds of SDOT per instruction. It sums 8 values per lane,
// so it cannot serve the formats whose float lanes are llama.cpp's 4-value lanes (Q8_0,
// Q5_0, Q6_K; quant/lanes.hpp). It serves Q4_0, Q4_1 and Q5_1, whose float steps are
// one fma per block and (row, token), as StepQ8_0 / StepQ8_1 within the summation
// tolerance, and Q4_K and Q5_K, whose sub-block sums are exact integers (MmlaKOffset:
// Q4_K's Step bit for bit, Q5_K within the summation tolerance of its Step). Below the
// i8mm level, dot_tile_mmla is tile.hpp's dot_tile.
#pragma once

#include "cpu/kernels/neon/blocks256.hpp"
#include "cpu/kernels/neon/blocks32.hpp"
#include "cpu/kernels/tile.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

#if defined(__ARM_FEATURE_MATMUL_INT8)
// 32 codes of two rows as SMMLA operands: register i holds values 8i .. 8i + 7 of the
// first row, then the same values of the second.
struct Pair32 {
  int8x16_t v[4];
};
inline Pair32 interleave(int8x16_t a0, int8x16_t a1, int8x16_t b0, int8x16_t b1) {
  const auto zip1 = [](int8x16_t x, int8x16_t y) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(x), vreinterpretq_s64_s8(y)));
  };
  const auto zip2 = [](int8x16_t x, int8x16_t y) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(x), vreinterpretq_s64_s8(y)));
  };
  return {{zip1(a0, b0), zip2(a0, b0), zip1(a1, b1), zip2(a1, b1)}};
}
// [w0 . a0, w0 . a1, w1 . a0, w1 . a1] over 32 values.
inline int32x4_t mmla32(const Pair32& w, const Pair32& a) {
  int32x4_t s = vdupq_n_s32(0);
  for (int i = 0; i < 4; ++i) s = vmmlaq_s32(s, w.v[i], a.v[i]);
  return s;
}
// {x0, x0, x1, x1} (per weight row) and {y0, y1, y0, y1} (per token).
inline float32x4_t per_row(float x0, float x1) { return float32x4_t{x0, x0, x1, x1}; }
inline float32x4_t per_token(float y0, float y1) { return float32x4_t{y0, y1, y0, y1}; }

// Pair step kernels: load_act / load_w read two rows `row_bytes` apart.
template <class W>
struct MmlaQ8_0 {
  static constexpr int kStep = quant::kQK;
  struct Act {
    Pair32 y;
    float32x4_t d;
  };
  struct Wt {
    Pair32 q;
    float32x4_t d;
  };
  using Acc = float32x4_t;
  static Acc zero() { return vdupq_n_f32(0.0f); }
  static Act load_act(const std::byte* a, size_t row_bytes, int64_t s) {
    const ActQ8_0 t0 = ActQ8_0::load(a, s), t1 = ActQ8_0::load(a + row_bytes, s);
    return {interleave(t0.y0, t0.y1, t1.y0, t1.y1), per_token(t0.d, t1.d)};
  }
  static Wt load_w(const std::byte* w, size_t row_bytes, int64_t s) {
    const WtCodes r0 = W::load(w, s), r1 = W::load(w + row_bytes, s);
    return {interleave(r0.q0, r0.q1, r1.q0, r1.q1), per_row(r0.d, r1.d)};
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    acc = vfmaq_f32(acc, vcvtq_f32_s32(mmla32(w.q, a.y)), vmulq_f32(w.d, a.d));
  }
  static float32x4_t finish(const Acc& acc) { return acc; }
};

template <class W>
struct MmlaQ8_1 {
  static constexpr int kStep = quant::kQK;
  struct Act {
    Pair32 y;
    float32x4_t d, s;
  };
  struct Wt {
    Pair32 q;
    float32x4_t d, m;
  };
  struct Acc {
    float32x4_t v, m;
  };
  static Acc zero() { return {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; }
  static Act load_act(const std::byte* a, size_t row_bytes, int64_t s) {
    const ActQ8_1 t0 = ActQ8_1::load(a, s), t1 = ActQ8_1::load(a + row_bytes, s);
    return {interleave(t0.y0, t0.y1, t1.y0, t1.y1), per_token(t0.d, t1.d), per_token(t0.s, t1.s)};
  }
  static Wt load_w(const std::byte* w, size_t row_bytes, int64_t s) {
    const WtCodesMin r0 = W::load(w, s), r1 = W::load(w + row_bytes, s);
    return {interleave(r0.q0, r0.q1, r1.q0, r1.q1), per_row(r0.d, r1.d), per_row(r0.m, r1.m)};
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    acc.v = vfmaq_f32(acc.v, vcvtq_f32_s32(mmla32(w.q, a.y)), vmulq_f32(w.d, a.d));
    acc.m = vaddq_f32(acc.m, vmulq_f32(w.m, a.s));
  }
  static float32x4_t finish(const Acc& acc) { return vaddq_f32(acc.v, acc.m); }
};

// Q4_K / Q5_K with Q8_K activations (W::Block, W::codes(block, j, c): the 32 codes of
// sub-block j as int8): per sub-block, SMMLA's four integer dot products are scaled by
// the rows' sub-block scales and summed in int32, as blocks256.hpp's scaled_sums, and
// the mins go through the activation's bsums, as min_terms. Integer sums are exact, so
// each (row, token) gets the integers of the step kernels, and then two fmas per
// super-block: acc += float(sum) * (d * d_act), min += float(mins) * (dmin * d_act),
// result acc - min, Q4_K's Step (llama.cpp's order) bit for bit.
template <class W>
struct MmlaKOffset {
  static constexpr int kStep = quant::kQKK;
  struct Act {
    const std::byte* qs[2];
    int16x8_t bsum_pairs[2];
    float32x4_t d;  // per_token
  };
  struct Wt {
    const std::byte* block[2];
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
      const std::byte* b = w + size_t(i) * row_bytes + size_t(s) * sizeof(typename W::Block);
      d[i] = half_at(b);
      dmin[i] = half_at(b + 2);
      const quant::KScales k = quant::unpack_k_scales(reinterpret_cast<const uint8_t*>(b + 4));
      for (int j = 0; j < 8; ++j) r.sc[i][j] = k.sc[j];
      r.mn[i] = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(k.mn)));
      r.block[i] = b;
    }
    r.d = per_row(d[0], d[1]);
    r.dmin = per_row(dmin[0], dmin[1]);
    return r;
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    int32x4_t sum = vdupq_n_s32(0);
    for (int j = 0; j < 8; ++j) {
      int8x16_t c0[2], c1[2];
      W::codes(w.block[0], j, c0);
      W::codes(w.block[1], j, c1);
      const Pair32 wq = interleave(c0[0], c0[1], c1[0], c1[1]);
      const Pair32 aq = interleave(load_s8(a.qs[0] + 32 * j), load_s8(a.qs[0] + 32 * j + 16),
                                   load_s8(a.qs[1] + 32 * j), load_s8(a.qs[1] + 32 * j + 16));
      const int32x4_t scale = {w.sc[0][j], w.sc[0][j], w.sc[1][j], w.sc[1][j]};
      sum = vmlaq_s32(sum, mmla32(wq, aq), scale);
    }
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

// A register tile of NP pairs of weight rows x NQ pairs of tokens (n: whole blocks).
template <class M>
struct MmlaTile {
  template <int NP, int NQ>
  static void run(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, float* out,
                  size_t out_stride, int64_t n) {
    typename M::Acc acc[NP][NQ];
    for (int p = 0; p < NP; ++p)
      for (int q = 0; q < NQ; ++q) acc[p][q] = M::zero();
    const int64_t steps = n / M::kStep;
    for (int64_t s = 0; s < steps; ++s) {
      typename M::Act act[NQ];
      for (int q = 0; q < NQ; ++q) act[q] = M::load_act(a + size_t(2 * q) * a_row_bytes, a_row_bytes, s);
      for (int p = 0; p < NP; ++p) {
        const typename M::Wt wt = M::load_w(w + size_t(2 * p) * w_row_bytes, w_row_bytes, s);
        for (int q = 0; q < NQ; ++q) M::madd(acc[p][q], wt, act[q]);
      }
    }
    for (int p = 0; p < NP; ++p)
      for (int q = 0; q < NQ; ++q) {
        const float32x4_t v = M::finish(acc[p][q]);
        float* o = out + size_t(2 * q) * out_stride + size_t(2 * p);
        o[0] = vgetq_lane_f32(v, 0);
        o[out_stride] = vgetq_lane_f32(v, 1);
        o[1] = vgetq_lane_f32(v, 2);
        o[out_stride + 1] = vgetq_lane_f32(v, 3);
      }
  }
};
#else
// Not used below the i8mm level (dot_tile_mmla is then dot_tile<Step>).
template <class W>
struct MmlaQ8_0 {};
template <class W>
struct MmlaQ8_1 {};
template <class W>
struct MmlaKOffset {};
#endif

// WeightKernels::dot_tile: at the i8mm level, pairs of rows x pairs of tokens with the
// pair kernel M in tiles of at most MW x MX (both even); an odd last row or token, and
// every other level, with the step kernel Step (tile.hpp's dot_tile). Tokens are then
// not summed alike whatever the batch: the table's dot_tile_invariant is dot_tile<Step>.
template <class Step, class M, int MW, int MX>
void dot_tile_mmla(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                   int n_x, float* out, size_t out_stride, int64_t n) {
#if defined(__ARM_FEATURE_MATMUL_INT8)
  static_assert(MW % 2 == 0 && MX % 2 == 0);
  if (n_x >= 2 && n_w >= 2) {
    static constexpr TileTable<MmlaTile<M>, MW / 2, MX / 2> table;
    const auto* w = static_cast<const std::byte*>(weights);
    const auto* a = static_cast<const std::byte*>(activations);
    const int n_w2 = n_w / 2 * 2, n_x2 = n_x / 2 * 2;
    for (int t = 0; t < n_x2; t += MX) {
      const int nx = n_x2 - t < MX ? n_x2 - t : MX;
      for (int r = 0; r < n_w2; r += MW) {
        const int nw = n_w2 - r < MW ? n_w2 - r : MW;
        table.fn[nw / 2 - 1][nx / 2 - 1](w + size_t(r) * w_row_bytes, w_row_bytes, a + size_t(t) * a_row_bytes,
                                         a_row_bytes, out + size_t(t) * out_stride + size_t(r), out_stride, n);
      }
    }
    if (n_w2 < n_w)
      dot_tile<Step, MW, MX>(w + size_t(n_w2) * w_row_bytes, w_row_bytes, 1, a, a_row_bytes, n_x2, out + n_w2,
                             out_stride, n);
    if (n_x2 < n_x)
      dot_tile<Step, MW, MX>(w, w_row_bytes, n_w, a + size_t(n_x2) * a_row_bytes, a_row_bytes, 1,
                             out + size_t(n_x2) * out_stride, out_stride, n);
    return;
  }
#endif
  dot_tile<Step, MW, MX>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n);
}

}  // namespace
}  // namespace ember::cpu::EMBER_NEON_NS
