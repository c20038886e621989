// AVX-512 kernels of Q4_1 weights (x = d * q + m) with Q8_1 activations.
#include "cpu/kernels/avx512/packed32.hpp"
#include "cpu/kernels/avx512/rows8_repacked.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::avx512 {
namespace {

struct Q4_1 {
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ4_1);
  static WtCodesMin load(const std::byte* row, int64_t s) {
    const std::byte* b0 = row + size_t(s) * 2 * kBlockBytes;
    const std::byte* b1 = b0 + kBlockBytes;
    return {nibbles_split(b0 + 4, b1 + 4), fp16_pair(load_u16(b0), load_u16(b1)),
            _mm512_mul_ps(fp16_pair(load_u16(b0 + 2), load_u16(b1 + 2)), _mm512_set1_ps(0.125f))};
  }
  static float ref_dot(const void* w, const void* a, int64_t n) { return quant::ref::dot_q4_1(w, a, n); }
};
using Step = StepQ8_1<Q4_1>;

// Prefill path: 16 blocks per step (packed32.hpp).
struct Q4_1Group {
  static constexpr bool kMin = true;
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ4_1);
  static WtGroup load_group(const std::byte* g) {
    WtGroup w;
    load_nibbles_transposed(g + 4, kBlockBytes, w.q);
    w.d = gather_fp16(g, kBlockBytes);
    w.m = gather_fp16(g + 2, kBlockBytes);
    return w;
  }
};
using Packed = PackedStep<Q4_1Group>;

// Weights repacked at load (rows8_repacked.hpp).
struct Q4_1Rows8 {
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ4_1);
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0, kSub = 1;
};

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t b = 0; b < n / quant::kQK; ++b, p += Q4_1::kBlockBytes)
    store_offset(dst + b * quant::kQK, nibbles_32(p + 4), _cvtsh_ss(load_u16(p)), _cvtsh_ss(load_u16(p + 2)));
}

constexpr int kPackedW = 4, kPackedX = 4;
constexpr bool kPackedDecode = true;
constexpr int kTileW = 4, kTileX = 3;

}  // namespace

extern const WeightKernels kQ4_1 = {quant::DType::q4_1, quant::DType::q8_1, quantize_q8_1, dot<Step>,
                                    dot_tile<Step, kTileW, kTileX>, dequantize, kTileW, kTileX,
    {packed_row_bytes<quant::BlockQ8_1>, pack_row<quant::BlockQ8_1, 0>,
     dot_tile_packed<Packed, Step, kPackedW, kPackedX>, kPackedW, kPackedX, kPackedDecode},
    nullptr, {}, nullptr, {dot_tile_rows8_repacked<Q4_1Rows8>, 4}};

}  // namespace ember::cpu::avx512
