// AVX-512 kernels of Q4_K weights with Q8_K activations, in llama.cpp's summation
// orders (quant/lanes.hpp): per super-block for single tokens, per 64 values for
// whole groups of 4 tokens (dot_tile_grouped).
#include "cpu/kernels/avx512/lanes.hpp"
#include "cpu/kernels/avx512/blocks256.hpp"
#include "cpu/kernels/avx512/rows8_k_repacked.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::avx512 {
namespace {

// llama.cpp's order (quant/lanes.hpp): one super-block per step, two scalar accumulators.

struct ActLanesQ4K {
  __m512i y[4];       // codes of sub-blocks (0, 2), (1, 3), (4, 6), (5, 7) (see WtKOffset)
  __m128i bsum_pairs;  // int16: bsums[2j] + bsums[2j + 1], j = 0..7
  float d;

  static ActLanesQ4K load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ8_K);
    const std::byte* qs = b + offsetof(quant::BlockQ8_K, qs);
    ActLanesQ4K a;
    a.d = load_f32(b);
    load_k_codes(qs, a.y);
    const std::byte* bs = b + offsetof(quant::BlockQ8_K, bsums);
    a.bsum_pairs = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bs)),
                                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(bs + 16)));
    return a;
  }
};

struct WtLanesQ4K {
  __m512i q[4];   // as WtKOffset
  __m512i sc[4];
  __m128i mn;     // int16 sub-block mins
  float d, dmin;
};

struct AccQ4K {
  float acc, min;
};

struct StepLanesQ4K {
  static constexpr int kStep = quant::kQKK;
  using Act = ActLanesQ4K;
  using Wt = WtLanesQ4K;
  using Acc = AccQ4K;
  static Acc zero() { return {0.0f, 0.0f}; }
  static Act load_act(const std::byte* a, int64_t s) { return Act::load(a, s); }
  static Wt load_w(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ4_K);
    Wt w;
    w.d = _cvtsh_ss(load_u16(b));
    w.dmin = _cvtsh_ss(load_u16(b + 2));
    const KScales8 k = unpack_scales(b + 4);
    k_scale_words(k, w.sc);
    w.mn = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(k.mn)));
    const std::byte* qs = b + offsetof(quant::BlockQ4_K, qs);
    load_nibbles(qs, w.q[0], w.q[1]);
    load_nibbles(qs + 64, w.q[2], w.q[3]);
    return w;
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    __m512i sum = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k) sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(w.q[k], a.y[k]), w.sc[k]);
    const __m128i mins = _mm_madd_epi16(w.mn, a.bsum_pairs);
    const int32_t isum = _mm512_reduce_add_epi32(sum);
    const int32_t imin = _mm_extract_epi32(mins, 0) + _mm_extract_epi32(mins, 1) + _mm_extract_epi32(mins, 2) +
                         _mm_extract_epi32(mins, 3);
    acc.acc = std::fma(float(isum), w.d * a.d, acc.acc);
    acc.min = std::fma(float(imin), w.dmin * a.d, acc.min);
  }
  static float reduce(const Acc& acc) { return acc.acc - acc.min; }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

// llama.cpp's batched order: the accumulators are updated after every 64 values.
struct StepLanesQ4KGrouped : StepLanesQ4K {
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    __m512i part[4];
    for (int k = 0; k < 4; ++k)
      part[k] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(w.q[k], a.y[k]), w.sc[k]);
    // Registers k hold sub-blocks (0, 2), (1, 3), (4, 6), (5, 7): 01 and 23 hold the
    // pairs (0 1 | 2 3) and (4 5 | 6 7) in their two halves.
    const __m512i p01 = _mm512_add_epi32(part[0], part[1]), p23 = _mm512_add_epi32(part[2], part[3]);
    const int32_t isum[4] = {_mm512_mask_reduce_add_epi32(0x00ff, p01), _mm512_mask_reduce_add_epi32(0xff00, p01),
                             _mm512_mask_reduce_add_epi32(0x00ff, p23), _mm512_mask_reduce_add_epi32(0xff00, p23)};
    alignas(16) int32_t imin[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(imin), _mm_madd_epi16(w.mn, a.bsum_pairs));
    const float d = w.d * a.d, dmin = w.dmin * a.d;
    for (int i = 0; i < 4; ++i) {
      acc.acc = std::fma(float(isum[i]), d, acc.acc);
      acc.min = std::fma(float(imin[i]), dmin, acc.min);
    }
  }
};

// Batched tokens in the grouped order, 16 weight rows at a time with one int32 lane
// per row, so that the float work of each 64 values (two FMAs) is done for 16 rows in
// one instruction. The codes of the 16 rows are gathered a dword (four values) of each
// row per register, once per 64 values, and reused by every token.
void grouped16(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, int n_x, float* out,
               size_t out_stride, int64_t n) {
  constexpr int kTokens = 32;
  constexpr size_t kBlock = sizeof(quant::BlockQ4_K), kActBlock = sizeof(quant::BlockQ8_K);
  const __m512i rows = row_offsets16(w_row_bytes);
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  const int64_t nb = n / quant::kQKK;
  for (int t0 = 0; t0 < n_x; t0 += kTokens) {
    const int nt = n_x - t0 < kTokens ? n_x - t0 : kTokens;
    alignas(64) float acc[kTokens][16], acc_min[kTokens][16];
    for (int t = 0; t < nt; ++t) {
      _mm512_store_ps(acc[t], _mm512_setzero_ps());
      _mm512_store_ps(acc_min[t], _mm512_setzero_ps());
    }
    for (int64_t b = 0; b < nb; ++b) {
      const std::byte* wb = w + size_t(b) * kBlock;
      alignas(64) int32_t sc[8][16], mn[8][16];
      alignas(64) float d[16], dmin[16];
      for (int c = 0; c < 16; ++c) {
        const auto& blk = *reinterpret_cast<const quant::BlockQ4_K*>(wb + size_t(c) * w_row_bytes);
        d[c] = _cvtsh_ss(blk.d);
        dmin[c] = _cvtsh_ss(blk.dmin);
        const quant::KScales k = quant::unpack_k_scales(blk.scales);
        for (int j = 0; j < 8; ++j) sc[j][c] = k.sc[j], mn[j][c] = k.mn[j];
      }
      const __m512 vd = _mm512_load_ps(d), vdmin = _mm512_load_ps(dmin);
      for (int p = 0; p < 4; ++p) {  // values 64p .. 64p + 63: sub-blocks 2p (low nibbles), 2p + 1 (high)
        __m512i lo[8], hi[8];
        for (int k = 0; k < 8; ++k) {
          const __m512i v = _mm512_i32gather_epi32(rows, wb + offsetof(quant::BlockQ4_K, qs) + 32 * p + 4 * k, 1);
          lo[k] = _mm512_and_si512(v, nibble);
          hi[k] = _mm512_and_si512(_mm512_srli_epi32(v, 4), nibble);
        }
        const __m512i sc0 = _mm512_load_si512(sc[2 * p]), sc1 = _mm512_load_si512(sc[2 * p + 1]);
        const __m512i mn0 = _mm512_load_si512(mn[2 * p]), mn1 = _mm512_load_si512(mn[2 * p + 1]);
        for (int t = 0; t < nt; ++t) {
          const std::byte* ab = a + size_t(t0 + t) * a_row_bytes + size_t(b) * kActBlock;
          const auto& act = *reinterpret_cast<const quant::BlockQ8_K*>(ab);
          __m512i isum, imin;
          pair_sums16(lo, hi, act, p, sc0, sc1, mn0, mn1, isum, imin);
          const __m512 da = _mm512_set1_ps(act.d);
          _mm512_store_ps(acc[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(vd, da), _mm512_load_ps(acc[t])));
          _mm512_store_ps(acc_min[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(vdmin, da),
                                                      _mm512_load_ps(acc_min[t])));
        }
      }
    }
    for (int t = 0; t < nt; ++t)
      _mm512_storeu_ps(out + size_t(t0 + t) * out_stride,
                       _mm512_sub_ps(_mm512_load_ps(acc[t]), _mm512_load_ps(acc_min[t])));
  }
}

// WeightKernels::dot_tile_grouped: grouped16 over whole groups of 16 rows, the
// step kernel (same order) for the rest.
void dot_tile_grouped(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                      int n_x, float* out, size_t out_stride, int64_t n) {
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(activations);
  int r = 0;
  for (; r + 16 <= n_w; r += 16)
    grouped16(w + size_t(r) * w_row_bytes, w_row_bytes, a, a_row_bytes, n_x, out + r, out_stride, n);
  if (r < n_w)
    dot_tile_lanes<StepLanesQ4KGrouped, 4, 4>(w + size_t(r) * w_row_bytes, w_row_bytes, n_w - r, a, a_row_bytes, n_x,
                                              out + r, out_stride, n);
}

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const quant::BlockQ4_K*>(src);
  for (int64_t b = 0; b < n / quant::kQKK; ++b) {
    const quant::BlockQ4_K& blk = blocks[b];
    const float d = _cvtsh_ss(blk.d), dmin = _cvtsh_ss(blk.dmin);
    const quant::KScales s = quant::unpack_k_scales(blk.scales);
    for (int g = 0; g < 4; ++g) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * g));
      const __m256i lo = _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
      float* y = dst + b * quant::kQKK + 64 * g;
      store_sub_block(y, lo, d * float(s.sc[2 * g]), dmin * float(s.mn[2 * g]));
      store_sub_block(y + 32, hi, d * float(s.sc[2 * g + 1]), dmin * float(s.mn[2 * g + 1]));
    }
  }
}

constexpr int kLanesW = 16, kLanesX = 4;

struct Q4KRec {
  using Block = quant::BlockQ4_K;
  static constexpr int kBits = 4;
};  // 16: chunks of whole grouped16 row groups

}  // namespace

extern const WeightKernels kQ4_K = {quant::DType::q4_k, quant::DType::q8_k, quantize_q8_k, dot<StepLanesQ4K>,
                                    dot_tile_lanes<StepLanesQ4K, 4, 4>, dequantize, kLanesW, kLanesX, {},
                                    dot_tile_grouped, {}, nullptr,
                                    {dot_tile_k_repacked<Q4KRec, false>, 4, dot_tile_k_repacked<Q4KRec, true>}};

}  // namespace ember::cpu::avx512
