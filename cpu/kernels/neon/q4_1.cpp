// ARM64 kernels of Q4_1 weights (x = d * q + m) with Q8_1 activations.
#include "cpu/kernels/neon/blocks32.hpp"
#include "cpu/kernels/neon/mmla.hpp"
#include "cpu/kernels/neon/rows8.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

struct Q4_1 {
  static WtCodesMin load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ4_1);
    uint8x16_t lo, hi;
    nibbles_32(b + 4, lo, hi);
    return {vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi), half_at(b), half_at(b + 2)};
  }
};
using Step = StepQ8_1<Q4_1>;

// Weights repacked at load (rows8.hpp).
struct Q4_1Rows8 {
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ4_1);
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0, kSub = 1, kBits = 4;
};

constexpr int kTileW = 4, kTileX = 2;

}  // namespace

extern const WeightKernels kQ4_1 = {quant::DType::q4_1, quant::DType::q8_1, quantize_q8_1, dot<Step>,
                                    dot_tile_mmla<Step, MmlaQ8_1<Q4_1>, kTileW, kTileX>,
                                    quant::ref::dequantize_q4_1, kTileW, kTileX, {}, nullptr, {},
                                    dot_tile<Step, kTileW, kTileX>, rows8_repacked<Q4_1Rows8>()};

}  // namespace ember::cpu::EMBER_NEON_NS
