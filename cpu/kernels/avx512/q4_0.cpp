// AVX-512 kernels of Q4_0 weights (x = d * (q - 8)) with Q8_0 activations.
#include "cpu/kernels/avx512/packed32.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::avx512 {
namespace {

struct Q4_0 {
  static constexpr int kOffset = 8;
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ4_0);
  static WtCodes load(const std::byte* row, int64_t s) {
    const std::byte* b0 = row + size_t(s) * 2 * kBlockBytes;
    const std::byte* b1 = b0 + kBlockBytes;
    return {nibbles_split(b0 + 2, b1 + 2), fp16_pair(load_u16(b0), load_u16(b1))};
  }
  static float ref_dot(const void* w, const void* a, int64_t n) { return quant::ref::dot_q4_0(w, a, n); }
};
using Step = StepQ8_0<Q4_0>;

// Prefill path: 16 blocks per step (packed32.hpp).
struct Q4_0Group {
  static constexpr bool kMin = false;
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ4_0);
  static WtGroup load_group(const std::byte* g) {
    WtGroup w;
    load_nibbles_transposed(g + 2, kBlockBytes, w.q);
    w.d = gather_fp16(g, kBlockBytes);
    return w;
  }
};
using Packed = PackedStep<Q4_0Group>;

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t b = 0; b < n / quant::kQK; ++b, p += Q4_0::kBlockBytes)
    store_symmetric(dst + b * quant::kQK, nibbles_32(p + 2), 8.0f, _cvtsh_ss(load_u16(p)));
}

constexpr int kPackedW = 4, kPackedX = 4;
constexpr bool kPackedDecode = true;
constexpr int kTileW = 4, kTileX = 4;

}  // namespace

extern const WeightKernels kQ4_0 = {quant::DType::q4_0, quant::DType::q8_0, quantize_q8_0, dot<Step>,
                                    dot_tile<Step, kTileW, kTileX>, dequantize, kTileW, kTileX,
    {packed_row_bytes<quant::BlockQ8_0>, pack_row<quant::BlockQ8_0, 8>,
     dot_tile_packed<Packed, Step, kPackedW, kPackedX>, kPackedW, kPackedX, kPackedDecode}};

}  // namespace ember::cpu::avx512
