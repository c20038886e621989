// AVX-512 kernels of Q8_W weights with Q8_T activations (W8A8, lib/quant/q8_w.cpp).
// Q8_W's blocks are Q8_0's layout with the row's one scale in every block, so the
// 16-row kernels of rows16.hpp take them as they take Q8_0 (codes made unsigned by
// +128, the activation side subtracting 128 * sum(a)), and, unlike Q8_0, whose default
// path keeps llama.cpp's eight-lane summation order, Q8_W needs no particular order:
// rows16 serves batches. Decode (and dot, and the rows past a call's last group of
// 16) takes the per-token step below, which sums a whole row's code products in int32
// lanes and scales once, as the AVX2 level does; rows16_one (rows16's one-token form)
// serves batch-invariant decode.
#include <cstdint>
#include <vector>

#include "cpu/kernels/avx512/rows16.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"
#include "quant/kv_formats.hpp"

namespace ember::cpu::avx512 {
namespace {


// Two blocks (64 values) per step, the weight codes made unsigned by +128 for vpdpbusd
// and the activation side's -128 * (sum of each 4 codes) added per step (computed once
// per activation step, which decode shares among all rows). The row's int32 lanes then
// hold its exact integer dot product (at most 88 * 4 * 255 * 127 per lane for rows of
// 5632 values; no overflow below about a million values), scaled once.
struct StepQ8W {
  static constexpr int kStep = 2 * quant::kQK;
  static constexpr size_t kBlock = sizeof(quant::BlockQ8_0);
  struct Act {
    __m512i y;
    __m512i bias;
    float d;
  };
  struct Wt {
    __m512i q;
    float d;
  };
  struct Acc {
    __m512i v;
    float scale;
  };
  static __m512i codes64(const std::byte* b0) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(load256(b0 + 2)), load256(b0 + kBlock + 2), 1);
  }
  static Acc zero() { return {_mm512_setzero_si512(), 0.0f}; }
  static Act load_act(const std::byte* a, int64_t s) {
    const std::byte* b0 = a + size_t(s) * 2 * kBlock;
    const __m512i y = codes64(b0);
    return {y, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum4_i8(y), 7)), _cvtsh_ss(load_u16(b0))};
  }
  static Wt load_w(const std::byte* w, int64_t s) {
    const std::byte* b0 = w + size_t(s) * 2 * kBlock;
    return {_mm512_xor_si512(codes64(b0), _mm512_set1_epi8(char(0x80))), _cvtsh_ss(load_u16(b0))};
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    acc.v = _mm512_dpbusd_epi32(_mm512_add_epi32(acc.v, a.bias), w.q, a.y);
    acc.scale = w.d * a.d;  // the same in every block of the row and token
  }
  // Rounded here, whatever follows: the loops add an odd last block's tail to it in
  // one place (tile_fixed) and in two (rows_sequential), and a product fused into that
  // add would give a token other bits alone than in a batch.
  static float reduce(const Acc& acc) {
    float r = acc.scale * float(hsum_i32(acc.v));
    __asm__("" : "+v"(r));
    return r;
  }
  // An odd last block: the reference (its scales are the row's and the token's).
  static float tail(const std::byte* w, const std::byte* a, int64_t first, int64_t n) {
    const size_t block = size_t(first / quant::kQK) * kBlock;
    return quant::ref::dot_q8_w(w + block, a + block, n - first);
  }
};

void dequantize(const void* src, float* dst, int64_t n) { quant::ref::dequantize_q8_w(src, dst, n); }

// Q8_T, as quant::ref::quantize_q8_t: one max |x| for the row, codes rounded half to
// even from x * (127 / max), d = fp16(max / 127) in every block.
void quantize_q8_t(const float* x, void* dst, int64_t n) {
  auto* blocks = static_cast<quant::BlockQ8_0*>(dst);
  __m512 m = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  const float amax = _mm512_reduce_max_ps(m);
  const uint16_t d = fp32_to_fp16(amax / 127.0f);
  const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  for (int64_t b = 0; b < n / quant::kQK; ++b) {
    const float* xb = x + b * quant::kQK;
    const __m512i q0 =
        _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb), id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i q1 = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16), id),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    blocks[b].d = d;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(blocks[b].qs), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(blocks[b].qs + 16), _mm512_cvtepi32_epi8(q1));
  }
}

constexpr int kTileW = 16, kTileX = 2;  // 16: chunks of whole rows16 groups
constexpr DotTileFn kPlain = dot_tile<StepQ8W, 3, 2>;
// Q8_0's blocks: rows16.hpp's 8-bit loads.
constexpr WeightKernels::Packed kRows16 = rows16_invariant<Rows16Q8, OneQ8, kPlain>();
constexpr WeightKernels::Packed kRows16Prefill = {kRows16.row_bytes, kRows16.pack, kRows16.dot_tile, kRows16.tile_w,
                                                  kRows16.tile_x, false};

// One butterfly stage inside each register: lanes j and j + h (h = 1, 2, 4, 8) become
// x_j + x_{j+h} and x_j - x_{j+h}, each the reference's single add or subtract.
template <int kStage>
__m512 butterfly_in(__m512 r) {
  __m512 swapped;
  if constexpr (kStage == 1) swapped = _mm512_permute_ps(r, 0xB1);
  else if constexpr (kStage == 2) swapped = _mm512_permute_ps(r, 0x4E);
  else if constexpr (kStage == 4) swapped = _mm512_shuffle_f32x4(r, r, 0xB1);
  else swapped = _mm512_shuffle_f32x4(r, r, 0x4E);
  constexpr __mmask16 kHigh = kStage == 1 ? 0xAAAA : kStage == 2 ? 0xCCCC : kStage == 4 ? 0xF0F0 : 0xFF00;
  return _mm512_mask_sub_ps(_mm512_add_ps(r, swapped), kHigh, swapped, r);
}

// quant::kv::rotate_groups(x, n, 64) into `out`, bit for bit: signs, the six butterfly
// stages in the same order (1, 2, 4, 8 inside registers; 16, 32 between them), * 1/8.
void rotate64(const float* x, float* out, int64_t n) {
  const __m512 eighth = _mm512_set1_ps(0.125f);
  for (int64_t g = 0; g < n; g += 64) {
    __m512 r[4];
    for (int k = 0; k < 4; ++k) {
      const auto flip = __mmask16((quant::kv::kRotationSigns64 >> (16 * k)) & 0xFFFF);
      // The sign bit flipped (exact negation, -0 for +0 as the reference's v = -v).
      const __m512i v = _mm512_loadu_si512(x + g + 16 * k);
      const __m512 signed_v = _mm512_castsi512_ps(_mm512_mask_xor_epi32(v, flip, v, _mm512_set1_epi32(INT32_MIN)));
      r[k] = butterfly_in<8>(butterfly_in<4>(butterfly_in<2>(butterfly_in<1>(signed_v))));
    }
    for (int h = 1; h < 4; h *= 2)
      for (int i = 0; i < 4; i += 2 * h)
        for (int k = i; k < i + h; ++k) {
          const __m512 a = r[k], c = r[k + h];
          r[k] = _mm512_add_ps(a, c);
          r[k + h] = _mm512_sub_ps(a, c);
        }
    for (int k = 0; k < 4; ++k) _mm512_storeu_ps(out + g + 16 * k, _mm512_mul_ps(r[k], eighth));
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

extern const WeightKernels kQ8_W = {quant::DType::q8_w, quant::DType::q8_t, quantize_q8_t, dot<StepQ8W>, kPlain,
                                    dequantize,         kTileW,             kTileX,        kRows16Prefill, nullptr,
                                    kRows16};

// Q8_WR (lib/quant/q8_wr.cpp): Q8_W's kernels on rotated weights, the activations rotated
// by the reference rotation (the same f32 values at every level), then quantized as Q8_T.
extern const WeightKernels kQ8_WR = {quant::DType::q8_wr, quant::DType::q8_tr, quantize_q8_tr, dot<StepQ8W>, kPlain,
                                    dequantize_wr,         kTileW,             kTileX,        kRows16Prefill, nullptr,
                                    kRows16};

}  // namespace ember::cpu::avx512
