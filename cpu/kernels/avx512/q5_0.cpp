// AVX-512 kernels of Q5_0 weights (x = d * (q - 16), 5-bit q) with Q8_0 activations,
// in llama.cpp's summation order (lanes.hpp).
#include "cpu/kernels/avx512/lanes.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::avx512 {
namespace {

// llama.cpp's order (quant/lanes.hpp): one block per step, eight float lanes.
struct Q5_0Lanes {
  static constexpr int kOffset = 16;
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ5_0);
  static WtLanes32 load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * kBlockBytes;
    return {add_high_bits(nibbles_32(b + 6), load_u32(b + 2)), _cvtsh_ss(load_u16(b))};
  }
};
using StepLanes = StepLanes32<Q5_0Lanes>;

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t b = 0; b < n / quant::kQK; ++b, p += Q5_0Lanes::kBlockBytes)
    store_symmetric(dst + b * quant::kQK, add_high_bits(nibbles_32(p + 6), load_u32(p + 2)), 16.0f,
                    _cvtsh_ss(load_u16(p)));
}

constexpr int kLanesW = 4, kLanesX = 8;

}  // namespace

extern const WeightKernels kQ5_0 = {quant::DType::q5_0, quant::DType::q8_0, quantize_q8_0, dot<StepLanes>,
                                    dot_tile_lanes32<Q5_0Lanes>, dequantize, kLanesW, kLanesX, {}};

}  // namespace ember::cpu::avx512
