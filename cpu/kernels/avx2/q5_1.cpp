// AVX2 kernels of Q5_1 weights (x = d * q + m, 5-bit q) with Q8_1 activations.
#include "cpu/kernels/avx2/blocks32.hpp"
#include "cpu/kernels/avx2/rows8_32.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

inline __m256i codes(const std::byte* b) { return _mm256_or_si256(nibbles_32(b + 8), high_bits_32(load_u32(b + 4))); }

struct Q5_1 {
  static WtCodesMin load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ5_1);
    return {codes(b), half_at(b), half_at(b + 2)};
  }
};
using Step = StepQ8_1<Q5_1>;

// Batches: rows8_32.hpp.
struct Q5_1Rows8 {
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ5_1);
  static constexpr size_t kCodes = 8, kHigh = 4;
  static constexpr int kBits = 5, kOffset = 0;
  static constexpr bool kMin = true;
};

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t b = 0; b < n / quant::kQK; ++b, p += sizeof(quant::BlockQ5_1))
    store_offset(dst + b * quant::kQK, codes(p), half_at(p), half_at(p + 2));
}

constexpr int kTileW = 3, kTileX = 2;
constexpr DotTileFn kPlain = dot_tile<Step, kTileW, kTileX>;

}  // namespace

extern const WeightKernels kQ5_1 = {quant::DType::q5_1, quant::DType::q8_1, quantize_q8_1, dot<Step>,
                                    dot_tile_rows8_32<Q5_1Rows8, kPlain>, dequantize, kRows8, 4, {}, nullptr,
                                    {}, kPlain, {dot_tile_rows8_32_repacked<Q5_1Rows8>, 4}};

}  // namespace ember::cpu::EMBER_AVX2_NS
