// ARM64 kernels of Q5_1 weights (x = d * q + m, 5-bit q) with Q8_1 activations.
#include "cpu/kernels/neon/blocks32.hpp"
#include "cpu/kernels/neon/mmla.hpp"
#include "cpu/kernels/neon/rows8.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

struct Q5_1 {
  static WtCodesMin load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ5_1);
    uint8x16_t lo, hi;
    nibbles_32(b + 8, lo, hi);
    const uint32_t qh = load_u32(b + 4);
    return {vreinterpretq_s8_u8(vorrq_u8(lo, high_bits_16(qh))),
            vreinterpretq_s8_u8(vorrq_u8(hi, high_bits_16(qh >> 16))), half_at(b), half_at(b + 2)};
  }
};
using Step = StepQ8_1<Q5_1>;

// Weights repacked at load (rows8.hpp).
struct Q5_1Rows8 {
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ5_1);
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0, kSub = 1, kBits = 5;
};

constexpr int kTileW = 4, kTileX = 2;

}  // namespace

extern const WeightKernels kQ5_1 = {quant::DType::q5_1, quant::DType::q8_1, quantize_q8_1, dot<Step>,
                                    dot_tile_mmla<Step, MmlaQ8_1<Q5_1>, kTileW, kTileX>,
                                    quant::ref::dequantize_q5_1, kTileW, kTileX, {}, nullptr, {},
                                    dot_tile<Step, kTileW, kTileX>, rows8_repacked<Q5_1Rows8>()};

}  // namespace ember::cpu::EMBER_NEON_NS
