// AVX-512 kernels of Q5_0 weights (x = d * (q - 16), 5-bit q) with Q8_0 activations.
#include "cpu/kernels/avx512/lanes.hpp"
#include "cpu/kernels/avx512/packed32.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::avx512 {
namespace {

struct Q5_0 {
  static constexpr int kOffset = 16;
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ5_0);
  static WtCodes load(const std::byte* row, int64_t s) {
    const std::byte* b0 = row + size_t(s) * 2 * kBlockBytes;
    const std::byte* b1 = b0 + kBlockBytes;
    const __m512i low = nibbles_split(b0 + 6, b1 + 6);
    const __mmask64 high = high_bits_split(load_u32(b0 + 2), load_u32(b1 + 2));
    return {_mm512_mask_add_epi8(low, high, low, _mm512_set1_epi8(0x10)), fp16_pair(load_u16(b0), load_u16(b1))};
  }
  static float ref_dot(const void* w, const void* a, int64_t n) { return quant::ref::dot_q5_0(w, a, n); }
};
using Step = StepQ8_0<Q5_0>;

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

// Prefill path: 16 blocks per step (packed32.hpp).
struct Q5_0Group {
  static constexpr bool kMin = false;
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ5_0);
  static WtGroup load_group(const std::byte* g) {
    WtGroup w;
    load_nibbles_transposed(g + 6, kBlockBytes, w.q);
    add_high_bits_transposed(gather_u32(g + 2, kBlockBytes), w.q);
    w.d = gather_fp16(g, kBlockBytes);
    return w;
  }
};
using Packed = PackedStep<Q5_0Group>;

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t b = 0; b < n / quant::kQK; ++b, p += Q5_0::kBlockBytes)
    store_symmetric(dst + b * quant::kQK, add_high_bits(nibbles_32(p + 6), load_u32(p + 2)), 16.0f,
                    _cvtsh_ss(load_u16(p)));
}

constexpr int kPackedW = 4, kPackedX = 4;
constexpr bool kPackedDecode = true;
constexpr int kTileW = 4, kTileX = 4;
constexpr int kLanesW = 4, kLanesX = 8;

}  // namespace

extern const WeightKernels kQ5_0 = {quant::DType::q5_0, quant::DType::q8_0, quantize_q8_0, dot<StepLanes>,
                                    dot_tile_lanes32<Q5_0Lanes>, dequantize, kLanesW, kLanesX, {}};

}  // namespace ember::cpu::avx512
