// ARM64 kernels of Q8_0 weights (x = d * q, signed q) with Q8_0 activations.
#include "cpu/kernels/neon/rows8_lanes.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_NEON_NS {
namespace {

struct Q8_0 {
  static WtCodes load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ8_0);
    return {load_s8(b + 2), load_s8(b + 18), half_at(b)};
  }
};
// llama.cpp's order (quant/lanes.hpp). SMMLA (i8mm) sums 8 products per lane, so it
// cannot keep the lanes of 4 values that this order needs: every level uses dot4.
using Step = StepQ8_0<Q8_0>;

constexpr int kTileW = 3, kTileX = 2;
// One token: the step kernel (rows_whole); batches: rows8_lanes.hpp, 8 rows per pass,
// the lane tiles for the rows after the last whole group of 8.
constexpr DotTileFn kBatches = dot_tile_rows8_lanes<rows8_lanes32<Q8_0>, dot_tile_lanes<Step, kTileW, kTileX>>;

}  // namespace

// Embedding lookups (one row per token) use the reference dequantizer: exact by definition.
extern const WeightKernels kQ8_0 = {quant::DType::q8_0, quant::DType::q8_0, quantize_q8_0, dot<Step>,
                                    kBatches, quant::ref::dequantize_q8_0, kRows8Lanes, kTileX, {}};

}  // namespace ember::cpu::EMBER_NEON_NS
