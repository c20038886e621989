// AVX-512 kernels of Q8_0 weights (x = d * q, signed q) with Q8_0 activations, in
// llama.cpp's summation order (lanes.hpp). vpdpbusd needs an unsigned operand: weight
// codes are shifted to q + 128 and the activation side subtracts 128 * sum(a).
#include "cpu/kernels/avx512/lanes.hpp"
#include "cpu/kernels/avx512/rows16.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::avx512 {
namespace {

// llama.cpp's order (quant/lanes.hpp): one block per step, eight float lanes.
struct Q8_0Lanes {
  static constexpr int kOffset = 128;
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ8_0);
  static WtLanes32 load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * kBlockBytes;
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
    return {_mm256_xor_si256(q, _mm256_set1_epi8(char(0x80))), _cvtsh_ss(load_u16(b))};
  }
};
using StepLanes = StepLanes32<Q8_0Lanes>;

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t b = 0; b < n / quant::kQK; ++b, p += Q8_0Lanes::kBlockBytes) {
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(load_u16(p)));
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    _mm512_storeu_ps(dst + b * quant::kQK, _mm512_mul_ps(d, i8_to_f32(_mm256_castsi256_si128(q))));
    _mm512_storeu_ps(dst + b * quant::kQK + 16, _mm512_mul_ps(d, i8_to_f32(_mm256_extracti128_si256(q, 1))));
  }
}

// Batch-invariant sums (WeightKernels::invariant_packed, the Engine): rows16 with
// rows16.hpp's 8-bit loads (Rows16Q8, OneQ8), codes made unsigned by +128. 11 vector
// operations per 16 rows x 32 values and token, against 4 per 2 x 32 in llama.cpp's
// eight-lane order. 16: chunks of whole rows16 groups, so that the same rows take
// rows16 whatever the token count.
constexpr int kLanesW = 16, kLanesX = 8;

}  // namespace

extern const WeightKernels kQ8_0 = {quant::DType::q8_0, quant::DType::q8_0, quantize_q8_0, dot<StepLanes>,
                                    dot_tile_lanes32<Q8_0Lanes>, dequantize, kLanesW, kLanesX, {}, nullptr,
                                    rows16_invariant<Rows16Q8, OneQ8, dot_tile_lanes32<Q8_0Lanes>>()};

}  // namespace ember::cpu::avx512
