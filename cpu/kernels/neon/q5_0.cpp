// ARM64 kernels of Q5_0 weights (x = d * (q - 16), 5-bit q) with Q8_0 activations.
#include "cpu/kernels/neon/rows8_lanes.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

struct Q5_0 {
  static WtCodes load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ5_0);
    uint8x16_t lo, hi;
    nibbles_32(b + 6, lo, hi);
    const uint32_t qh = load_u32(b + 2);
    const int8x16_t offset = vdupq_n_s8(16);
    return {vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, high_bits_16(qh))), offset),
            vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(hi, high_bits_16(qh >> 16))), offset), half_at(b)};
  }
};
// llama.cpp's order (quant/lanes.hpp); see q8_0.cpp for why SMMLA is not used.
using Step = StepQ8_0<Q5_0>;

constexpr int kTileW = 3, kTileX = 2;
// One token: the step kernel (rows_whole); batches: rows8_lanes.hpp, 8 rows per pass,
// the lane tiles for the rows after the last whole group of 8.
constexpr DotTileFn kBatches = dot_tile_rows8_lanes<rows8_lanes32<Q5_0>, dot_tile_lanes<Step, kTileW, kTileX>>;

}  // namespace

extern const WeightKernels kQ5_0 = {quant::DType::q5_0, quant::DType::q8_0, quantize_q8_0, dot<Step>,
                                    kBatches, quant::ref::dequantize_q5_0, kRows8Lanes, kTileX, {}};

}  // namespace ember::cpu::EMBER_NEON_NS
