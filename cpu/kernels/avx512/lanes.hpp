// AVX-512 step kernels in llama.cpp's summation order (quant/lanes.hpp) for Q8_0 and
// Q5_0 weights with Q8_0 activations (Q4_K and Q6_K have theirs in q4_k.cpp, q6_k.cpp). Every float
// operation is the one lib/quant's reference performs, in the same order, so the
// results are bit-identical to it and to llama.cpp's x86 kernels on the same codes.
// The integer parts use VNNI and may be grouped freely (integer sums are exact).
#pragma once

#include <cmath>

#include "cpu/kernels/tile.hpp"

#include "cpu/kernels/avx512/blocks32.hpp"

namespace ember::cpu::avx512 {
namespace {

// ggml's hsum_float_8: upper half onto lower, lanes 2-3 onto 0-1, lane 1 onto 0.
inline float hsum8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// ---- 32-value blocks: one block per step, eight lanes of four values ----

// Activation block (Q8_0) for weights whose unsigned codes carry offset kOffset.
template <int kOffset>
struct ActLanes32 {
  __m256i y;     // 32 codes
  __m256i bias;  // -kOffset * (sum of the lane's 4 codes)
  float d;

  static ActLanes32 load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ8_0);
    ActLanes32 a;
    a.y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
    const __m256i sum4 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), a.y);
    a.bias = _mm256_mullo_epi32(sum4, _mm256_set1_epi32(-kOffset));
    a.d = _cvtsh_ss(load_u16(b));
    return a;
  }
};

struct WtLanes32 {
  __m256i q;  // unsigned codes in value order
  float d;
};

// W: kOffset and load(row, block) -> WtLanes32.
template <class W>
struct StepLanes32 {
  static constexpr int kStep = quant::kQK;
  using Act = ActLanes32<W::kOffset>;
  using Wt = WtLanes32;
  using Acc = __m256;
  static Acc zero() { return _mm256_setzero_ps(); }
  static Act load_act(const std::byte* a, int64_t s) { return Act::load(a, s); }
  static Wt load_w(const std::byte* w, int64_t s) { return W::load(w, s); }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    const __m256i sum = _mm256_dpbusd_epi32(a.bias, w.q, a.y);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(w.d * a.d), _mm256_cvtepi32_ps(sum), acc);
  }
  static float reduce(const Acc& acc) { return hsum8(acc); }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }  // n % 32 == 0
};

// ---- Batches: two tokens per 512-bit register (one token's eight lanes per half) ----

// Register tile of NW weight rows x 2*NP tokens; the weight codes are broadcast to both
// halves, each half holds one token's codes, bias and scale. The float operations per
// output are StepLanes32's.
template <class W, int NW, int NP>
void tile_lanes32x2(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, float* out,
                    size_t out_stride, int64_t n) {
  constexpr size_t kActBlock = sizeof(quant::BlockQ8_0);
  __m512 acc[NW][NP];
  for (int r = 0; r < NW; ++r)
    for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n / quant::kQK; ++s) {
    __m512i y[NP], bias[NP];
    __m512 da[NP];
    for (int p = 0; p < NP; ++p) {
      const std::byte* b0 = a + size_t(2 * p) * a_row_bytes + size_t(s) * kActBlock;
      const std::byte* b1 = b0 + a_row_bytes;
      y[p] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2))),
                                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)), 1);
      bias[p] = _mm512_mullo_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), y[p]),
                                   _mm512_set1_epi32(-W::kOffset));
      da[p] = _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(load_u16(b0))), _mm256_set1_ps(_cvtsh_ss(load_u16(b1))), 1);
    }
    for (int r = 0; r < NW; ++r) {
      const WtLanes32 wt = W::load(w + size_t(r) * w_row_bytes, s);
      const __m512i q = _mm512_broadcast_i64x4(wt.q);
      const __m512 wd = _mm512_set1_ps(wt.d);
      for (int p = 0; p < NP; ++p) {
        const __m512i sum = _mm512_dpbusd_epi32(bias[p], q, y[p]);
        acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(wd, da[p]), _mm512_cvtepi32_ps(sum), acc[r][p]);
      }
    }
  }
  for (int r = 0; r < NW; ++r)
    for (int p = 0; p < NP; ++p) {
      out[size_t(2 * p) * out_stride + size_t(r)] = hsum8(_mm512_castps512_ps256(acc[r][p]));
      out[size_t(2 * p + 1) * out_stride + size_t(r)] = hsum8(_mm512_extractf32x8_ps(acc[r][p], 1));
    }
}

// WeightKernels::dot_tile of the 32-value formats in llama.cpp's order: one token with
// rows_whole, pairs of tokens with tile_lanes32x2 (4 rows x 8 tokens per tile, smaller
// at the edges), an odd last token with the one-token step.
template <class W>
void dot_tile_lanes32(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                      int n_x, float* out, size_t out_stride, int64_t n) {
  using Step = StepLanes32<W>;
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(activations);
  if (n_x == 1) {
    rows_whole<Step>(w, w_row_bytes, n_w, a, out, n);
    return;
  }
  constexpr int kRows = 4, kPairs = 4;
  using Fn = void (*)(const std::byte*, size_t, const std::byte*, size_t, float*, size_t, int64_t);
  static constexpr Fn kTiles[kRows][kPairs] = {
      {tile_lanes32x2<W, 1, 1>, tile_lanes32x2<W, 1, 2>, tile_lanes32x2<W, 1, 3>, tile_lanes32x2<W, 1, 4>},
      {tile_lanes32x2<W, 2, 1>, tile_lanes32x2<W, 2, 2>, tile_lanes32x2<W, 2, 3>, tile_lanes32x2<W, 2, 4>},
      {tile_lanes32x2<W, 3, 1>, tile_lanes32x2<W, 3, 2>, tile_lanes32x2<W, 3, 3>, tile_lanes32x2<W, 3, 4>},
      {tile_lanes32x2<W, 4, 1>, tile_lanes32x2<W, 4, 2>, tile_lanes32x2<W, 4, 3>, tile_lanes32x2<W, 4, 4>}};
  const int pairs = n_x / 2;
  for (int p0 = 0; p0 < pairs; p0 += kPairs) {
    const int np = pairs - p0 < kPairs ? pairs - p0 : kPairs;
    for (int r = 0; r < n_w; r += kRows) {
      const int nw = n_w - r < kRows ? n_w - r : kRows;
      kTiles[nw - 1][np - 1](w + size_t(r) * w_row_bytes, w_row_bytes, a + size_t(2 * p0) * a_row_bytes, a_row_bytes,
                             out + size_t(2 * p0) * out_stride + size_t(r), out_stride, n);
    }
  }
  if (n_x % 2)
    dot_tile_with<PlainTile<Step>, 4, 1>(w, w_row_bytes, n_w, a + size_t(n_x - 1) * a_row_bytes, a_row_bytes, 1,
                                         out + size_t(n_x - 1) * out_stride, out_stride, n);
}

}  // namespace
}  // namespace ember::cpu::avx512
