// AVX2 kernels of Q8_W weights with Q8_T activations (W8A8, lib/quant/q8_w.cpp): one
// scale per weight row and one per token, so a whole row's code products are summed in
// int32 lanes (at most 4 * 127 * 127 per block and lane: no overflow below 2^31 for any
// row shorter than 130,000 values) and converted and scaled once per row and token.
// Without VNNI the products go through Q8_0's sign trick (|w| * sign(a, w) by
// vpmaddubsw, no int16 overflow at 2 * 127 * 127); with AVX-VNNI vpdpbusd takes |w|
// and the sign-adjusted activation codes directly.
#include "cpu/kernels/avx2/blocks32.hpp"
#include "cpu/kernels/avx2/rows8.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

struct StepQ8W {
  static constexpr int kStep = quant::kQK;
  struct Act {
    __m256i y;
    float d;
  };
  struct Wt {
    __m256i q;
    float d;
  };
  struct Acc {
    __m256i v;
    float scale;
  };
  static Acc zero() { return {_mm256_setzero_si256(), 0.0f}; }
  static Act load_act(const std::byte* a, int64_t s) {
    const std::byte* b = a + size_t(s) * sizeof(quant::BlockQ8_0);
    return {load256(b + 2), half_at(b)};
  }
  static Wt load_w(const std::byte* w, int64_t s) {
    const std::byte* b = w + size_t(s) * sizeof(quant::BlockQ8_0);
    return {load256(b + 2), half_at(b)};
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    const __m256i u = _mm256_sign_epi8(w.q, w.q), s = _mm256_sign_epi8(a.y, w.q);
#if defined(EMBER_AVX2_VNNI)
    acc.v = _mm256_dpbusd_avx_epi32(acc.v, u, s);
#else
    acc.v = _mm256_add_epi32(acc.v, sum_pairs(_mm256_maddubs_epi16(u, s)));
#endif
    acc.scale = w.d * a.d;   // the same in every block of the row and token
  }
  static float reduce(const Acc& acc) { return acc.scale * float(hsum_i32(acc.v)); }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

void dequantize(const void* src, float* dst, int64_t n) { quant::ref::dequantize_q8_w(src, dst, n); }

constexpr int kTileW = 3, kTileX = 2;
constexpr DotTileFn kPlain = dot_tile<StepQ8W, kTileW, kTileX>;

}  // namespace

// Activations: the reference per-token quantizer (one pass over a token's row, small
// next to the row's products with every weight row).
extern const WeightKernels kQ8_W = {quant::DType::q8_w, quant::DType::q8_t, quant::ref::quantize_q8_t,
                                    dot<StepQ8W>,       kPlain,             dequantize,
                                    kTileW,             kTileX,             {},
                                    nullptr,            {},                 kPlain};

}  // namespace ember::cpu::EMBER_AVX2_NS
