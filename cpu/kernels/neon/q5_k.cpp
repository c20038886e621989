// ARM64 kernels of Q5_K weights with Q8_K activations (see blocks256.hpp).
// The fifth bit of code l of sub-block j is bit j of qh[l].
#include "cpu/kernels/neon/blocks256.hpp"
#include "cpu/kernels/neon/mmla.hpp"
#include "cpu/kernels/neon/rows8_k.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

inline void load_codes(const std::byte* block, WtKOffset& w) {
  load_k_nibbles(block + offsetof(quant::BlockQ5_K, qs), w);
  const uint8x16_t qh[2] = {load_u8(block + offsetof(quant::BlockQ5_K, qh)),
                            load_u8(block + offsetof(quant::BlockQ5_K, qh) + 16)};
  for (int j = 0; j < 8; ++j)
    for (int h = 0; h < 2; ++h) {
      // Bit j to bit 4 (a negative count shifts right).
      const uint8x16_t bit = vandq_u8(vshlq_u8(qh[h], vdupq_n_s8(int8_t(4 - j))), vdupq_n_u8(0x10));
      w.q[2 * j + h] = vreinterpretq_s8_u8(vorrq_u8(vreinterpretq_u8_s8(w.q[2 * j + h]), bit));
    }
}

// Not a llama.cpp-order format: one float vector accumulator, within the summation
// tolerance of the reference.
struct Step {
  static constexpr int kStep = quant::kQKK;
  using Act = ActQ8_K;
  using Wt = WtKOffset;
  using Acc = float32x4_t;
  static Acc zero() { return vdupq_n_f32(0.0f); }
  static Act load_act(const std::byte* a, int64_t s) { return ActQ8_K::load(a, s); }
  static Wt load_w(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ5_K);
    Wt w;
    load_k_offset_scales(b, w);
    load_codes(b, w);
    return w;
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    int32x4_t lo, hi;
    min_terms(w, a, lo, hi);
    acc = vfmaq_f32(acc, vcvtq_f32_s32(scaled_sums(w, a, 0, 8)), vdupq_n_f32(w.d * a.d));
    acc = vfmsq_f32(acc, vcvtq_f32_s32(vaddq_s32(lo, hi)), vdupq_n_f32(w.dmin * a.d));
  }
  static float reduce(const Acc& acc) { return vaddvq_f32(acc); }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

// The 32 codes of sub-block j for the SMMLA tiles (mmla.hpp), as load_codes.
struct Q5KCodes {
  using Block = quant::BlockQ5_K;
  static void codes(const std::byte* block, int j, int8x16_t c[2]) {
    for (int h = 0; h < 2; ++h) {
      const uint8x16_t v = load_u8(block + offsetof(quant::BlockQ5_K, qs) + 32 * (j / 2) + 16 * h);
      const uint8x16_t low = j % 2 == 0 ? vandq_u8(v, vdupq_n_u8(0x0f)) : vshrq_n_u8(v, 4);
      const uint8x16_t qh = load_u8(block + offsetof(quant::BlockQ5_K, qh) + 16 * h);
      const uint8x16_t bit = vandq_u8(vshlq_u8(qh, vdupq_n_s8(int8_t(4 - j))), vdupq_n_u8(0x10));
      c[h] = vreinterpretq_s8_u8(vorrq_u8(low, bit));
    }
  }
};

constexpr int kTileW = 2, kTileX = 2;

}  // namespace

// dot_tile: SMMLA pairs at the i8mm level (MmlaKOffset's order, not Step's: the table
// then names dot_tile<Step> for batch-invariant sums), dot_tile<Step> below it.
extern const WeightKernels kQ5_K = {quant::DType::q5_k,
                                    quant::DType::q8_k,
                                    quantize_q8_k,
                                    dot<Step>,
                                    dot_tile_mmla<Step, MmlaKOffset<Q5KCodes>, kTileW, kTileX>,
                                    quant::ref::dequantize_q5_k,
                                    kTileW,
                                    kTileX,
                                    {},
                                    nullptr,
                                    {},
                                    dot_tile<Step, kTileW, kTileX>,
                                    rows8_k_repacked<5>()};

}  // namespace ember::cpu::EMBER_NEON_NS
