// ARM64 kernels of Q6_K weights with Q8_K activations (see blocks256.hpp).
#include "cpu/kernels/neon/rows8_lanes.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

struct WtQ6_K {
  int8x16_t q[16];  // q - 32 of values 16i .. 16i + 15 (sub-block i)
  int32_t sc[16];
  float d;
};

// Codes of a super-block in value order (bit layout in lib/quant/blocks.hpp): half h
// (128 values) takes its low bits from ql[64h ..] and its high bits from qh[32h ..];
// quarter k of the half takes the low (k < 2) or high nibbles of ql[64h + 32 (k & 1) ..]
// and bits 2k, 2k + 1 of qh.
inline void unpack_codes(const std::byte* block, int8x16_t* q) {
  const uint8x16_t nibble = vdupq_n_u8(0x0f), bits45 = vdupq_n_u8(0x30);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 2; ++i) {  // values l = 16i .. 16i + 15 of each quarter
      const uint8x16_t l0 = load_u8(block + 64 * h + 16 * i), l1 = load_u8(block + 64 * h + 32 + 16 * i);
      const uint8x16_t hb = load_u8(block + 128 + 32 * h + 16 * i);
      const uint8x16_t codes[4] = {
          vorrq_u8(vandq_u8(l0, nibble), vandq_u8(vshlq_n_u8(hb, 4), bits45)),
          vorrq_u8(vandq_u8(l1, nibble), vandq_u8(vshlq_n_u8(hb, 2), bits45)),
          vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(hb, bits45)),
          vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(hb, 2), bits45)),
      };
      for (int k = 0; k < 4; ++k)
        q[8 * h + 2 * k + i] = vsubq_s8(vreinterpretq_s8_u8(codes[k]), vdupq_n_s8(32));
    }
}

// llama.cpp's order (quant/lanes.hpp): float lane m takes, per super-block, the
// integer sum over values v with (v mod 32) / 4 == m. dot4 lane m of the first 16
// values of a 32-value chunk is float lane m, of the second 16 float lane 4 + m.
struct Step {
  static constexpr int kStep = quant::kQKK;
  using Act = ActQ8_K;
  using Wt = WtQ6_K;
  struct Acc {
    float32x4_t lo, hi;
  };
  static Acc zero() { return {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; }
  static Act load_act(const std::byte* a, int64_t s) { return ActQ8_K::load(a, s); }
  static Wt load_w(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ6_K);
    Wt w;
    w.d = half_at(b + offsetof(quant::BlockQ6_K, d));
    const auto* sc = reinterpret_cast<const int8_t*>(b + offsetof(quant::BlockQ6_K, scales));
    for (int i = 0; i < 16; ++i) w.sc[i] = sc[i];
    unpack_codes(b, w.q);
    return w;
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    int32x4_t lo = vdupq_n_s32(0), hi = vdupq_n_s32(0);
    for (int k = 0; k < 8; ++k) {
      lo = vmlaq_n_s32(lo, dot4(vdupq_n_s32(0), w.q[2 * k], a.codes(2 * k)), w.sc[2 * k]);
      hi = vmlaq_n_s32(hi, dot4(vdupq_n_s32(0), w.q[2 * k + 1], a.codes(2 * k + 1)), w.sc[2 * k + 1]);
    }
    const float32x4_t d = vdupq_n_f32(a.d * w.d);
    acc.lo = vfmaq_f32(acc.lo, vcvtq_f32_s32(lo), d);
    acc.hi = vfmaq_f32(acc.hi, vcvtq_f32_s32(hi), d);
  }
  static float reduce(const Acc& acc) { return lanes8_sum(acc.lo, acc.hi); }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

constexpr int kTileW = 2, kTileX = 2;
// One token: the step kernel (rows_whole); batches: rows8_lanes.hpp, 8 rows per pass,
// the lane tiles for the rows after the last whole group of 8.
constexpr DotTileFn kBatches = dot_tile_rows8_lanes<rows8_q6_k<unpack_codes>, dot_tile_lanes<Step, kTileW, kTileX>>;

}  // namespace

extern const WeightKernels kQ6_K = {quant::DType::q6_k, quant::DType::q8_k, quantize_q8_k, dot<Step>,
                                    kBatches, quant::ref::dequantize_q6_k, kRows8Lanes, kTileX, {}};

}  // namespace ember::cpu::EMBER_NEON_NS
