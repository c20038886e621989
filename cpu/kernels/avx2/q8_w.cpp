// AVX2 kernels of Q8_W weights with Q8_T activations (W8A8, lib/quant/q8_w.cpp): one
// scale per weight row and one per token, so a whole row's code products are summed in
// int32 lanes (at most 4 * 127 * 127 per block and lane: no overflow below 2^31 for any
// row shorter than 130,000 values) and converted and scaled once per row and token.
// Without VNNI the products go through Q8_0's sign trick (|w| * sign(a, w) by
// vpmaddubsw, no int16 overflow at 2 * 127 * 127); with AVX-VNNI vpdpbusd takes |w|
// and the sign-adjusted activation codes directly.
#include <vector>

#include "cpu/kernels/avx2/blocks32.hpp"
#include "cpu/kernels/avx2/rows8.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"
#include "quant/kv_formats.hpp"

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

// Q8_T, as quant::ref::quantize_q8_t: one max |x| for the row, codes rounded half to
// even from x * (127 / max), d = fp16(max / 127) in every block.
void quantize_q8_t(const float* x, void* dst, int64_t n) {
  auto* blocks = static_cast<quant::BlockQ8_0*>(dst);
  __m256 m = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + i)));
  const float amax = hmax(m);
  const uint16_t d = fp32_to_fp16(amax / 127.0f);
  const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  for (int64_t b = 0; b < n / quant::kQK; ++b) {
    __m256i q[4];
    for (int i = 0; i < 4; ++i) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + b * quant::kQK + 8 * i), id);
      q[i] = _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    blocks[b].d = d;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(blocks[b].qs), pack_i8(q[0], q[1], q[2], q[3]));
  }
}

constexpr int kTileW = 3, kTileX = 2;
constexpr DotTileFn kPlain = dot_tile<StepQ8W, kTileW, kTileX>;

// One butterfly stage inside each register: lanes j and j + h (h = 1, 2, 4) become
// x_j + x_{j+h} and x_j - x_{j+h}, each the reference's single add or subtract.
template <int kStage>
__m256 butterfly_in(__m256 r) {
  __m256 swapped;
  if constexpr (kStage == 1) swapped = _mm256_permute_ps(r, 0xB1);
  else if constexpr (kStage == 2) swapped = _mm256_permute_ps(r, 0x4E);
  else swapped = _mm256_permute2f128_ps(r, r, 1);
  constexpr int kHigh = kStage == 1 ? 0xAA : kStage == 2 ? 0xCC : 0xF0;
  return _mm256_blend_ps(_mm256_add_ps(r, swapped), _mm256_sub_ps(swapped, r), kHigh);
}

// quant::kv::rotate_groups(x, n, 64) into `out`, bit for bit: signs, the six butterfly
// stages in the same order (1, 2, 4 inside registers; 8, 16, 32 between them), * 1/8.
void rotate64(const float* x, float* out, int64_t n) {
  const uint32_t* masks = quant::kv::kRotationSignMasks64.bits;  // 64-byte aligned
  const __m256 eighth = _mm256_set1_ps(0.125f);
  for (int64_t g = 0; g < n; g += 64) {
    __m256 r[8];
    for (int k = 0; k < 8; ++k) {
      const __m256 sign = _mm256_load_ps(reinterpret_cast<const float*>(masks + 8 * k));
      r[k] = butterfly_in<4>(butterfly_in<2>(butterfly_in<1>(_mm256_xor_ps(_mm256_loadu_ps(x + g + 8 * k), sign))));
    }
    for (int h = 1; h < 8; h *= 2)
      for (int i = 0; i < 8; i += 2 * h)
        for (int k = i; k < i + h; ++k) {
          const __m256 a = r[k], c = r[k + h];
          r[k] = _mm256_add_ps(a, c);
          r[k + h] = _mm256_sub_ps(a, c);
        }
    for (int k = 0; k < 8; ++k) _mm256_storeu_ps(out + g + 8 * k, _mm256_mul_ps(r[k], eighth));
  }
}

void quantize_q8_tr(const float* x, void* dst, int64_t n) {
  static_assert(quant::ref::kQ8WRGroup == 64);
  thread_local std::vector<float> rotated;
  rotated.resize(size_t(n));
  rotate64(x, rotated.data(), n);
  quantize_q8_t(rotated.data(), dst, n);
}

void dequantize_wr(const void* src, float* dst, int64_t n) { quant::ref::dequantize_q8_wr(src, dst, n); }

}  // namespace

extern const WeightKernels kQ8_W = {quant::DType::q8_w, quant::DType::q8_t, quantize_q8_t,
                                    dot<StepQ8W>,       kPlain,             dequantize,
                                    kTileW,             kTileX,             {},
                                    nullptr,            {},                 kPlain};

// Q8_WR (lib/quant/q8_wr.cpp): Q8_W's kernels on rotated weights, the activations rotated
// by the reference rotation (the same f32 values at every level), then quantized as Q8_T.
extern const WeightKernels kQ8_WR = {quant::DType::q8_wr, quant::DType::q8_tr, quantize_q8_tr,
                                    dot<StepQ8W>,       kPlain,             dequantize_wr,
                                    kTileW,             kTileX,             {},
                                    nullptr,            {},                 kPlain};

}  // namespace ember::cpu::EMBER_AVX2_NS
