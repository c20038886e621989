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

// One block of a pair of activation rows, ready for tile_lanes32x2.
template <int kOffset>
struct PairBlock {
  __m512i y;     // codes: token 0 in the low half, token 1 in the high half
  __m512i bias;  // -kOffset * (sum of each lane's 4 codes)
  __m512 d;      // the two tokens' block scales, 8 lanes each

  static PairBlock load(const std::byte* row0, const std::byte* row1, int64_t s) {
    const std::byte* b0 = row0 + size_t(s) * sizeof(quant::BlockQ8_0);
    const std::byte* b1 = row1 + size_t(s) * sizeof(quant::BlockQ8_0);
    PairBlock p;
    p.y = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2))),
                             _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)), 1);
    p.bias = _mm512_mullo_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), p.y),
                                _mm512_set1_epi32(-kOffset));
    p.d = _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(load_u16(b0))), _mm256_set1_ps(_cvtsh_ss(load_u16(b1))), 1);
    return p;
  }
};

// Register tile of NW weight rows x NP token pairs over `blocks` prepared pair blocks
// (pairs[p * n_blocks + s]); the weight codes are broadcast to both halves. The
// float operations per output are StepLanes32's.
template <class W, int NW, int NP>
void tile_lanes32x2(const std::byte* w, size_t w_row_bytes, const PairBlock<W::kOffset>* pairs, int64_t n_blocks,
                    float* out, size_t out_stride) {
  __m512 acc[NW][NP];
  for (int r = 0; r < NW; ++r)
    for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n_blocks; ++s) {
    for (int r = 0; r < NW; ++r) {
      const WtLanes32 wt = W::load(w + size_t(r) * w_row_bytes, s);
      const __m512i q = _mm512_broadcast_i64x4(wt.q);
      const __m512 wd = _mm512_set1_ps(wt.d);
      for (int p = 0; p < NP; ++p) {
        const PairBlock<W::kOffset>& a = pairs[size_t(p) * size_t(n_blocks) + size_t(s)];
        const __m512i sum = _mm512_dpbusd_epi32(a.bias, q, a.y);
        acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(wd, a.d), _mm512_cvtepi32_ps(sum), acc[r][p]);
      }
    }
  }
  for (int r = 0; r < NW; ++r)
    for (int p = 0; p < NP; ++p) {
      out[size_t(2 * p) * out_stride + size_t(r)] = hsum8(_mm512_castps512_ps256(acc[r][p]));
      out[size_t(2 * p + 1) * out_stride + size_t(r)] = hsum8(_mm512_extractf32x8_ps(acc[r][p], 1));
    }
}

// Instances of a pair tile T (T::Fn, T::run<R, P>) for every shape up to MR rows x MP
// token pairs, indexed [rows - 1][pairs - 1].
template <class T, int MR, int MP>
struct PairTiles {
  typename T::Fn fn[MR][MP];
  constexpr PairTiles() : fn{} { fill<1, 1>(); }
  template <int R, int P>
  constexpr void fill() {
    fn[R - 1][P - 1] = &T::template run<R, P>;
    if constexpr (P < MP) {
      fill<R, P + 1>();
    } else if constexpr (R < MR) {
      fill<R + 1, 1>();
    }
  }
};

template <class W>
struct Lanes32Tile {
  using Fn = void (*)(const std::byte*, size_t, const PairBlock<W::kOffset>*, int64_t, float*, size_t);
  template <int R, int P>
  static void run(const std::byte* w, size_t w_row_bytes, const PairBlock<W::kOffset>* pairs, int64_t n_blocks,
                  float* out, size_t out_stride) {
    tile_lanes32x2<W, R, P>(w, w_row_bytes, pairs, n_blocks, out, out_stride);
  }
};

// WeightKernels::dot_tile over token pairs: one token with rows_whole<Step>; pairs of
// tokens, kPairs at a time, prepared once per call (Pair::load(row0, row1, step), in a
// per-thread buffer) and multiplied by Tile (see PairTiles) kRows weight rows at a
// time; an odd last token with the one-token Step.
template <class Pair, class Tile, class Step, int kRows, int kPairs>
void dot_tile_pairs(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                    int n_x, float* out, size_t out_stride, int64_t n) {
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(activations);
  if (n_x == 1) {
    rows_whole<Step>(w, w_row_bytes, n_w, a, out, n);
    return;
  }
  static constexpr PairTiles<Tile, kRows, kPairs> kTiles;
  const int64_t n_steps = n / Step::kStep;
  thread_local std::vector<Pair> pairs;
  if (pairs.size() < size_t(kPairs * n_steps)) pairs.resize(size_t(kPairs * n_steps));
  const int n_pairs = n_x / 2;
  for (int p0 = 0; p0 < n_pairs; p0 += kPairs) {
    const int np = n_pairs - p0 < kPairs ? n_pairs - p0 : kPairs;
    for (int p = 0; p < np; ++p) {
      const std::byte* row0 = a + size_t(2 * (p0 + p)) * a_row_bytes;
      for (int64_t s = 0; s < n_steps; ++s)
        pairs[size_t(p) * size_t(n_steps) + size_t(s)] = Pair::load(row0, row0 + a_row_bytes, s);
    }
    for (int r = 0; r < n_w; r += kRows) {
      const int nw = n_w - r < kRows ? n_w - r : kRows;
      kTiles.fn[nw - 1][np - 1](w + size_t(r) * w_row_bytes, w_row_bytes, pairs.data(), n_steps,
                                out + size_t(2 * p0) * out_stride + size_t(r), out_stride);
    }
  }
  if (n_x % 2)
    dot_tile_with<PlainTile<Step>, 4, 1>(w, w_row_bytes, n_w, a + size_t(n_x - 1) * a_row_bytes, a_row_bytes, 1,
                                         out + size_t(n_x - 1) * out_stride, out_stride, n);
}

// WeightKernels::dot_tile of the 32-value formats in llama.cpp's order.
template <class W>
void dot_tile_lanes32(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                      int n_x, float* out, size_t out_stride, int64_t n) {
  dot_tile_pairs<PairBlock<W::kOffset>, Lanes32Tile<W>, StepLanes32<W>, 4, 4>(weights, w_row_bytes, n_w, activations,
                                                                             a_row_bytes, n_x, out, out_stride, n);
}

}  // namespace
}  // namespace ember::cpu::avx512
