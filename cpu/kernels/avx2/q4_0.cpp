// AVX2 kernels of Q4_0 weights (x = d * (q - 8)) with Q8_0 activations.
#include "cpu/kernels/avx2/blocks32.hpp"
#include "cpu/kernels/avx2/rows8_32.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

struct Q4_0 {
  static constexpr int kOffset = 8;
  static WtCodes load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ4_0);
    return {nibbles_32(b + 2), _mm256_setzero_si256(), half_at(b)};
  }
};
using Step = StepQ8_0<Q4_0>;

// Batches: rows8_32.hpp.
struct Q4_0Rows8 {
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ4_0);
  static constexpr size_t kCodes = 2, kHigh = 0;
  static constexpr int kBits = 4, kOffset = 8;
  static constexpr bool kMin = false;
};

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t b = 0; b < n / quant::kQK; ++b, p += sizeof(quant::BlockQ4_0))
    store_symmetric(dst + b * quant::kQK, nibbles_32(p + 2), 8.0f, half_at(p));
}

constexpr int kTileW = 3, kTileX = 2;
constexpr DotTileFn kPlain = dot_tile<Step, kTileW, kTileX>;

}  // namespace

extern const WeightKernels kQ4_0 = {quant::DType::q4_0, quant::DType::q8_0, quantize_q8_0, dot<Step>,
                                    dot_tile_rows8_32<Q4_0Rows8, kPlain>, dequantize, kRows8, 4, {}, nullptr,
                                    {}, kPlain, {dot_tile_rows8_32_repacked<Q4_0Rows8>, 4, nullptr, -Q4_0Rows8::kOffset}};

}  // namespace ember::cpu::EMBER_AVX2_NS
