// ARM64 kernels of Q4_0 weights (x = d * (q - 8)) with Q8_0 activations.
#include "cpu/kernels/neon/blocks32.hpp"
#include "cpu/kernels/neon/mmla.hpp"
#include "cpu/kernels/neon/rows8.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

struct Q4_0 {
  static WtCodes load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ4_0);
    uint8x16_t lo, hi;
    nibbles_32(b + 2, lo, hi);
    const int8x16_t offset = vdupq_n_s8(8);
    return {vsubq_s8(vreinterpretq_s8_u8(lo), offset), vsubq_s8(vreinterpretq_s8_u8(hi), offset), half_at(b)};
  }
};
using Step = StepQ8_0<Q4_0>;

// Weights repacked at load (rows8.hpp).
struct Q4_0Rows8 {
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ4_0);
  static constexpr bool kMin = false;
  static constexpr int kOffset = 8, kSub = 1, kBits = 4;
};

constexpr int kTileW = 4, kTileX = 2;

}  // namespace

extern const WeightKernels kQ4_0 = {quant::DType::q4_0, quant::DType::q8_0, quantize_q8_0, dot<Step>,
                                    dot_tile_mmla<Step, MmlaQ8_0<Q4_0>, kTileW, kTileX>,
                                    quant::ref::dequantize_q4_0, kTileW, kTileX, {}, nullptr, {},
                                    dot_tile<Step, kTileW, kTileX>, rows8_repacked<Q4_0Rows8>()};

}  // namespace ember::cpu::EMBER_NEON_NS
