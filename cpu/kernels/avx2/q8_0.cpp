// AVX2 kernels of Q8_0 weights (x = d * q, signed q) with Q8_0 activations.
#include "cpu/kernels/avx2/blocks32.hpp"
#include "cpu/kernels/avx2/rows8_i16.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

struct Q8_0 {
  static constexpr int kOffset = kVnni ? 128 : 0;
  static WtCodes load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ8_0);
    const __m256i q = load256(b + 2);
    if constexpr (kVnni) return {_mm256_xor_si256(q, _mm256_set1_epi8(char(0x80))), q, half_at(b)};
    return {_mm256_abs_epi8(q), q, half_at(b)};
  }
};
// One block per step, eight float lanes: llama.cpp's order (quant/lanes.hpp).
using Step = StepQ8_0<Q8_0>;

// Batches: rows8_lanes.hpp (signed codes and the sign trick; + 128 with VNNI).
struct Q8_0Rows8 {
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ8_0);
  static constexpr int kOffset = kVnni ? 128 : 0;
  static void load(const std::byte* block, size_t stride, __m256i q[8]) {
    load_transposed8(block + 2, stride, q);
    if constexpr (kVnni)
      for (int m = 0; m < 8; ++m) q[m] = _mm256_xor_si256(q[m], _mm256_set1_epi8(char(0x80)));
  }
};

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t b = 0; b < n / quant::kQK; ++b, p += sizeof(quant::BlockQ8_0)) {
    const __m256 d = _mm256_set1_ps(half_at(p));
    for (int i = 0; i < 4; ++i) {
      const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 2 + 8 * i))));
      _mm256_storeu_ps(dst + b * quant::kQK + 8 * i, _mm256_mul_ps(d, v));
    }
  }
}

constexpr int kTileW = 4, kTileX = 4;
constexpr DotTileFn kLanes = dot_tile_lanes<Step, kTileW, kTileX>;

// Batches: rows8_i16.hpp (int16 codes; on the avx2vnni level vpdpbusd on the codes + 128).
constexpr DotTileFn kBatches = dot_tile_i16<Q8_0Rows8, kLanes>;

}  // namespace

// Prefill: the activations widened once per op (rows8_i16.hpp), blocks of kI16Call tokens.
extern const WeightKernels kQ8_0 = {quant::DType::q8_0, quant::DType::q8_0, quantize_q8_0, dot<Step>,
                                    kBatches, dequantize, kRows8, kTileX,
                                    {i16_packed_row_bytes, i16_pack, dot_tile_i16_packed<Q8_0Rows8, kLanes>, kRows8,
                                     kI16MinTokens, false, kI16Call}};

}  // namespace ember::cpu::EMBER_AVX2_NS
