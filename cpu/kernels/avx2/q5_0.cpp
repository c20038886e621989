// AVX2 kernels of Q5_0 weights (x = d * (q - 16), 5-bit q) with Q8_0 activations.
#include "cpu/kernels/avx2/blocks32.hpp"
#include "cpu/kernels/avx2/rows8_32.hpp"
#include "cpu/kernels/avx2/rows8_lanes.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

inline __m256i codes(const std::byte* b) { return _mm256_or_si256(nibbles_32(b + 6), high_bits_32(load_u32(b + 2))); }

struct Q5_0 {
  static constexpr int kOffset = 16;
  static WtCodes load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ5_0);
    return {codes(b), _mm256_setzero_si256(), half_at(b)};
  }
};
// One block per step, eight float lanes: llama.cpp's order (quant/lanes.hpp).
using Step = StepQ8_0<Q5_0>;

// Batches: rows8_lanes.hpp, the codes unpacked as rows8_32.hpp does.
struct Q5_0Rows8 {
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ5_0);
  static constexpr size_t kCodes = 6, kHigh = 2;
  static constexpr int kBits = 5, kOffset = 16;
  static constexpr bool kMin = false;
  static void load(const std::byte* block, size_t stride, __m256i q[8]) { load_codes_rows8<Q5_0Rows8>(block, stride, q); }
};

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t b = 0; b < n / quant::kQK; ++b, p += sizeof(quant::BlockQ5_0))
    store_symmetric(dst + b * quant::kQK, codes(p), 16.0f, half_at(p));
}

constexpr int kTileW = 4, kTileX = 4;
constexpr DotTileFn kLanes = dot_tile_lanes<Step, kTileW, kTileX>;

}  // namespace

extern const WeightKernels kQ5_0 = {quant::DType::q5_0, quant::DType::q8_0, quantize_q8_0, dot<Step>,
                                    dot_tile_rows8_lanes<Q5_0Rows8, kLanes>, dequantize, kRows8, kTileX, {}};

}  // namespace ember::cpu::EMBER_AVX2_NS
