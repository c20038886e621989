// AVX-512 kernels of Q5_0 weights (x = d * (q - 16), 5-bit q) with Q8_0 activations,
// in llama.cpp's summation order (lanes.hpp).
#include "cpu/kernels/avx512/lanes.hpp"
#include "cpu/kernels/avx512/rows16.hpp"
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

// Batch-invariant sums (WeightKernels::dot_tile_invariant, the Engine): rows16.hpp.
// The fifth bits: the qh dword of each row, shifted so that the four bits of a
// register's values come lowest, picks one of 16 patterns (bit 4 of each byte) with
// a permute, which is ORed onto the nibbles.
struct Q5_0Rows16 {
  static constexpr int kOffset = 16;
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ5_0);
  static void load(const std::byte* wb, __m512i rows, __m512i q[8], __m512& d) {
    alignas(64) static const int32_t kHigh[16] = {
        0x00000000, 0x00000010, 0x00001000, 0x00001010, 0x00100000, 0x00100010, 0x00101000, 0x00101010,
        0x10000000, 0x10000010, 0x10001000, 0x10001010, 0x10100000, 0x10100010, 0x10101000, 0x10101010};
    const __m512i high = _mm512_load_si512(kHigh);
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    const __m512i qh = _mm512_i32gather_epi32(rows, wb + 2, 1);
    for (int k = 0; k < 4; ++k) {
      const __m512i v = _mm512_i32gather_epi32(rows, wb + 6 + 4 * k, 1);
      // permutexvar reads the low 4 bits of each index lane: bits 4k .. 4k + 3 of qh.
      q[k] = _mm512_or_si512(_mm512_and_si512(v, nibble),
                             _mm512_permutexvar_epi32(_mm512_srli_epi32(qh, unsigned(4 * k)), high));
      q[k + 4] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(v, 4), nibble),
                                 _mm512_permutexvar_epi32(_mm512_srli_epi32(qh, unsigned(16 + 4 * k)), high));
    }
    d = gather_scales16(wb, rows);
  }
};

// One token (rows16_one): two blocks of a row per register in value order, the qs
// bytes of each twice (low nibbles, then the high ones), the 64 fifth bits as one mask.
struct Q5_0One {
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ5_0);
  static constexpr bool kSplit = false;
  static __m256i one(const std::byte* b) { return add_high_bits(nibbles_32(b + 6), load_u32(b + 2)); }
  static __m512i pair(const std::byte* b) {
    const std::byte* c = b + kBlockBytes;
    const __m256i qs =
        _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(c + 6), reinterpret_cast<const __m128i*>(b + 6));
    const __m512i twice = _mm512_shuffle_i64x2(_mm512_castsi256_si512(qs), _mm512_castsi256_si512(qs), 0x50);
    const __m512i codes =
        _mm512_and_si512(_mm512_mask_srli_epi16(twice, 0xff00ff00u, twice, 4), _mm512_set1_epi8(0x0f));
    const __mmask64 high = _cvtu64_mask64(uint64_t(load_u32(b + 2)) | uint64_t(load_u32(c + 2)) << 32);
    return _mm512_mask_add_epi8(codes, high, codes, _mm512_set1_epi8(0x10));
  }
};

// 16: chunks of whole rows16 groups, so that the same rows take rows16 whatever the token count.
constexpr int kLanesW = 16, kLanesX = 8;

}  // namespace

extern const WeightKernels kQ5_0 = {quant::DType::q5_0, quant::DType::q8_0, quantize_q8_0, dot<StepLanes>,
                                    dot_tile_lanes32<Q5_0Lanes>, dequantize, kLanesW, kLanesX, {}, nullptr,
                                    rows16_invariant<Q5_0Rows16, Q5_0One, dot_tile_lanes32<Q5_0Lanes>>()};

}  // namespace ember::cpu::avx512
