// AVX-512 kernels of Q4_0 weights (x = d * (q - 8)) with Q8_0 activations.
#include "cpu/kernels/avx512/blocks32.hpp"
#include "cpu/kernels/avx512/rows16.hpp"
#include "cpu/kernels/avx512/rows8_repacked.hpp"
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

// Batches: rows16.hpp, the codes of 16 rows split into low and high nibbles.
struct Q4_0Rows16 {
  static constexpr int kOffset = 8;
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ4_0);
  static void load(const std::byte* wb, __m512i rows, __m512i q[8], __m512& d) {
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    for (int k = 0; k < 4; ++k) {
      const __m512i v = _mm512_i32gather_epi32(rows, wb + 2 + 4 * k, 1);
      q[k] = _mm512_and_si512(v, nibble);
      q[k + 4] = _mm512_and_si512(_mm512_srli_epi32(v, 4), nibble);
    }
    d = gather_scales16(wb, rows);
  }
};

// One token (rows16_one): two blocks of a row per register in split order.
struct Q4_0One {
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ4_0);
  static constexpr bool kSplit = true;
  static __m256i one(const std::byte* b) { return nibbles_32(b + 2); }
  static __m512i pair(const std::byte* b) { return nibbles_split(b + 2, b + kBlockBytes + 2); }
};

// Weights repacked at load (rows8_repacked.hpp).
struct Q4_0Rows8 {
  static constexpr size_t kBlockBytes = sizeof(quant::BlockQ4_0);
  static constexpr bool kMin = false;
  static constexpr int kOffset = 8, kSub = 1;
};

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t b = 0; b < n / quant::kQK; ++b, p += Q4_0::kBlockBytes)
    store_symmetric(dst + b * quant::kQK, nibbles_32(p + 2), 8.0f, _cvtsh_ss(load_u16(p)));
}

constexpr int kTileW = 16, kTileX = 4;  // 16: chunks of whole rows16 groups

// Batches of more than kTileX tokens take rows16 (packed rows: Q8_0 blocks and their
// sums); fewer take register tiles of the per-token step. Batch-invariant: rows16 always.
constexpr WeightKernels::Packed kRows16 = rows16_invariant<Q4_0Rows16, Q4_0One, dot_tile<Step, 4, 4>>();
constexpr WeightKernels::Packed kRows16Prefill = {kRows16.row_bytes, kRows16.pack, kRows16.dot_tile, kRows16.tile_w,
                                                  kRows16.tile_x, false};

}  // namespace

extern const WeightKernels kQ4_0 = {quant::DType::q4_0, quant::DType::q8_0, quantize_q8_0, dot<Step>,
                                    dot_tile<Step, 4, 4>, dequantize, kTileW, kTileX, kRows16Prefill, nullptr,
                                    kRows16, nullptr, {dot_tile_rows8_repacked<Q4_0Rows8>, 4, nullptr, -Q4_0Rows8::kOffset}};

}  // namespace ember::cpu::avx512
