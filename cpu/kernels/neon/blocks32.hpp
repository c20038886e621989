// ARM64 step kernels shared by the 32-value formats: one step is one block
// (cpu/kernels/tile.hpp describes step kernels).
//
// Integer part: weight codes are made signed int8 (Q4_0: q - 8, Q5_0: q - 16, Q8_0
// as stored; Q4_1 / Q5_1 codes are small and non-negative), so that dot4 (SDOT, or
// vmull + pairwise adds) multiplies them with the activation codes directly; no
// offset term is needed, unlike x86's unsigned x signed vpmaddubsw.
#pragma once

#include "cpu/kernels/neon/simd.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

// Activation step of a Q8_0 row: 32 codes and the scale.
struct ActQ8_0 {
  int8x16_t y0, y1;
  float d;
  static ActQ8_0 load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ8_0);
    return {load_s8(b + 2), load_s8(b + 18), half_at(b)};
  }
};

// Weight step: 32 signed codes in value order and the scale.
struct WtCodes {
  int8x16_t q0, q1;
  float d;
};

// Eight float lanes, lane m summing values 4m .. 4m + 3 of every block.
struct AccLanes {
  float32x4_t lo, hi;
};

// Step kernel for Q8_0 activations; W provides load(row, step) -> WtCodes. One block
// per step in eight float lanes, lane[m] = fma(d_w * d_a, sum of values 4m .. 4m + 3,
// lane[m]): llama.cpp's order (quant/lanes.hpp), which Q8_0 and Q5_0 must follow
// bit for bit and Q4_0 follows too.
template <class W>
struct StepQ8_0 {
  static constexpr int kStep = quant::kQK;
  using Act = ActQ8_0;
  using Wt = WtCodes;
  using Acc = AccLanes;
  static Acc zero() { return {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; }
  static Act load_act(const std::byte* a, int64_t s) { return Act::load(a, s); }
  static Wt load_w(const std::byte* w, int64_t s) { return W::load(w, s); }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    const int32x4_t lo = dot4(vdupq_n_s32(0), w.q0, a.y0), hi = dot4(vdupq_n_s32(0), w.q1, a.y1);
    const float32x4_t d = vdupq_n_f32(w.d * a.d);
    acc.lo = vfmaq_f32(acc.lo, vcvtq_f32_s32(lo), d);
    acc.hi = vfmaq_f32(acc.hi, vcvtq_f32_s32(hi), d);
  }
  static float reduce(const Acc& acc) { return lanes8_sum(acc.lo, acc.hi); }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

// Activation step of a Q8_1 row: codes, scale and s = d * sum(codes).
struct ActQ8_1 {
  int8x16_t y0, y1;
  float d, s;
  static ActQ8_1 load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ8_1);
    return {load_s8(b + 4), load_s8(b + 20), half_at(b), half_at(b + 2)};
  }
};

// Weight step of the offset formats (x = d * q + m): codes 0..31 and d, m.
struct WtCodesMin {
  int8x16_t q0, q1;
  float d, m;
};

// Accumulator of the offset formats: the vector part and the sum of m_w * s_a.
struct AccMin {
  float32x4_t v;
  float m;
};

template <class W>
struct StepQ8_1 {
  static constexpr int kStep = quant::kQK;
  using Act = ActQ8_1;
  using Wt = WtCodesMin;
  using Acc = AccMin;
  static Acc zero() { return {vdupq_n_f32(0.0f), 0.0f}; }
  static Act load_act(const std::byte* a, int64_t s) { return Act::load(a, s); }
  static Wt load_w(const std::byte* w, int64_t s) { return W::load(w, s); }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    const int32x4_t sum = dot4(dot4(vdupq_n_s32(0), w.q0, a.y0), w.q1, a.y1);
    acc.v = vfmaq_f32(acc.v, vcvtq_f32_s32(sum), vdupq_n_f32(w.d * a.d));
    acc.m += w.m * a.s;
  }
  static float reduce(const Acc& acc) { return vaddvq_f32(acc.v) + acc.m; }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

}  // namespace
}  // namespace ember::cpu::EMBER_NEON_NS
