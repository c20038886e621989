// AVX2 kernels of Q4_K weights with Q8_K activations (see blocks256.hpp).
#include <cmath>
#include <type_traits>

#include "cpu/kernels/avx2/blocks256.hpp"
#include "cpu/kernels/avx2/rows8.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

// llama.cpp's order (quant/lanes.hpp): two scalar accumulators per dot product,
// updated once per super-block (Step) or once per 64 values (StepGrouped).
struct AccQ4K {
  float acc, min;
};

struct Step {
  static constexpr int kStep = quant::kQKK;
  using Act = ActQ8_K;
  using Wt = WtKOffset;
  using Acc = AccQ4K;
  static Acc zero() { return {0.0f, 0.0f}; }
  static Act load_act(const std::byte* a, int64_t s) { return ActQ8_K::load(a, s); }
  static Wt load_w(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ4_K);
    Wt w;
    load_k_offset_scales(b, w);
    load_k_nibbles(b + offsetof(quant::BlockQ4_K, qs), w);
    return w;
  }
  // sc[j] * dot of sub-block j, as int32 lanes.
  static __m256i sub_block(const Wt& w, const Act& a, int j) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w.q[j], a.codes(j)), scale_of(w.sc, j));
  }
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    __m256i sum = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) sum = _mm256_add_epi32(sum, sub_block(w, a, j));
    // Lane j: mn[j] * (bsums[2j] + bsums[2j + 1]).
    const __m256i mins = _mm256_madd_epi16(a.bsums, w.mn);
    acc.acc = std::fma(float(hsum_i32(sum)), w.d * a.d, acc.acc);
    acc.min = std::fma(float(hsum_i32(mins)), w.dmin * a.d, acc.min);
  }
  static float reduce(const Acc& acc) { return acc.acc - acc.min; }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

struct StepGrouped : Step {
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    alignas(32) int32_t mins[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(mins), _mm256_madd_epi16(a.bsums, w.mn));
    const float d = w.d * a.d, dmin = w.dmin * a.d;
    for (int p = 0; p < 4; ++p) {
      const int32_t isum = hsum_i32(_mm256_add_epi32(sub_block(w, a, 2 * p), sub_block(w, a, 2 * p + 1)));
      acc.acc = std::fma(float(isum), d, acc.acc);
      acc.min = std::fma(float(mins[2 * p] + mins[2 * p + 1]), dmin, acc.min);
    }
  }
};

// Batches, 8 weight rows at a time with one int32 lane per row (rows8.hpp), in either
// of llama.cpp's orders: kGrouped updates the accumulators after every 64 values
// (StepGrouped), otherwise once per super-block (Step). Per sub-block j and token,
// eight vpmaddubsw (summed in int16: at most 8 * 2 * 15 * 128 < 2^15) and one vpmaddwd
// by the rows' scales give sc_j * dot_j for 8 rows; the mins go through the token's
// bsums, (bsums[4p] + bsums[4p + 1], bsums[4p + 2] + bsums[4p + 3]) against the
// rows' (mn[2p], mn[2p + 1]) in one vpmaddwd.
// sc_j * dot_j of one sub-block for 8 rows (lane r), `sc` as rows8 stores it: with
// VNNI the whole int32 dot product times the scale (vpmulld), else the int16 sums
// (at most 8 * 2 * 15 * 128 < 2^15) by the int16 scale pairs (vpmaddwd).
inline __m256i sub_block_rows8(const __m256i q[8], const std::byte* a, const int32_t* sc) {
  const __m256i scale = _mm256_load_si256(reinterpret_cast<const __m256i*>(sc));
  if constexpr (kVnni) return _mm256_mullo_epi32(dot_rows8<8>(_mm256_setzero_si256(), q, a), scale);
  return _mm256_madd_epi16(maddubs_sum<8>(q, a), scale);
}

template <bool kGrouped>
void rows8(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, int n_x, float* out,
           size_t out_stride, int64_t n) {
  constexpr size_t kBlock = sizeof(quant::BlockQ4_K), kActBlock = sizeof(quant::BlockQ8_K);
  const int64_t nb = n / quant::kQKK;
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  for (int t0 = 0; t0 < n_x; t0 += kRows8Tokens) {
    const int nt = n_x - t0 < kRows8Tokens ? n_x - t0 : kRows8Tokens;
    alignas(32) float acc[kRows8Tokens][8], acc_min[kRows8Tokens][8];
    for (int t = 0; t < nt; ++t) {
      _mm256_store_ps(acc[t], _mm256_setzero_ps());
      _mm256_store_ps(acc_min[t], _mm256_setzero_ps());
    }
    for (int64_t b = 0; b < nb; ++b) {
      const std::byte* wb = w + size_t(b) * kBlock;
      __m256i q[8][8];  // [sub-block][dword], lane r: row r
      for (int g = 0; g < 4; ++g) {
        __m256i bytes[8];
        load_transposed8(wb + offsetof(quant::BlockQ4_K, qs) + 32 * g, w_row_bytes, bytes);
        for (int k = 0; k < 8; ++k) {
          q[2 * g][k] = _mm256_and_si256(bytes[k], nibble);
          q[2 * g + 1][k] = _mm256_and_si256(_mm256_srli_epi16(bytes[k], 4), nibble);
        }
      }
      // sc[j][r] (in both int16 halves without VNNI); mn[p][r] = (mn[2p], mn[2p + 1]) as int16.
      alignas(32) int32_t sc[8][8], mn[4][8];
      for (int r = 0; r < 8; ++r) {
        const KScales8 s = unpack_scales(wb + size_t(r) * w_row_bytes + 4);
        for (int j = 0; j < 8; ++j) sc[j][r] = int32_t(((s.sc >> (8 * j)) & 0xff) * (kVnni ? 1u : 0x10001u));
        for (int p = 0; p < 4; ++p)
          mn[p][r] = int32_t(((s.mn >> (16 * p)) & 0xff) | ((s.mn >> (16 * p + 8)) & 0xff) << 16);
      }
      const __m256 d = load_fp16_rows8(wb, w_row_bytes), dmin = load_fp16_rows8(wb + 2, w_row_bytes);
      for (int t = 0; t < nt; ++t) {
        const std::byte* ab = a + size_t(t0 + t) * a_row_bytes + size_t(b) * kActBlock;
        const std::byte* qs = ab + offsetof(quant::BlockQ8_K, qs);
        const auto* bs = reinterpret_cast<const int16_t*>(ab + offsetof(quant::BlockQ8_K, bsums));
        const __m256 da = _mm256_set1_ps(load_f32(ab));
        const __m256 dd = _mm256_mul_ps(d, da), ddmin = _mm256_mul_ps(dmin, da);
        __m256 vacc = _mm256_load_ps(acc[t]), vmin = _mm256_load_ps(acc_min[t]);
        __m256i isum = _mm256_setzero_si256(), imin = _mm256_setzero_si256();
        for (int p = 0; p < 4; ++p) {
          __m256i s = sub_block_rows8(q[2 * p], qs + 64 * p, sc[2 * p]);
          s = _mm256_add_epi32(s, sub_block_rows8(q[2 * p + 1], qs + 64 * p + 32, sc[2 * p + 1]));
          const int32_t pair = int32_t(uint16_t(bs[4 * p] + bs[4 * p + 1])) |
                               int32_t(uint32_t(uint16_t(bs[4 * p + 2] + bs[4 * p + 3])) << 16);
          const __m256i m = _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(mn[p])),
                                              _mm256_set1_epi32(pair));
          if constexpr (kGrouped) {
            vacc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dd, vacc);
            vmin = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), ddmin, vmin);
          } else {
            isum = _mm256_add_epi32(isum, s);
            imin = _mm256_add_epi32(imin, m);
          }
        }
        if constexpr (!kGrouped) {
          vacc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dd, vacc);
          vmin = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), ddmin, vmin);
        }
        _mm256_store_ps(acc[t], vacc);
        _mm256_store_ps(acc_min[t], vmin);
      }
    }
    for (int t = 0; t < nt; ++t)
      store_rows8(out + size_t(t0 + t) * out_stride, _mm256_sub_ps(_mm256_load_ps(acc[t]), _mm256_load_ps(acc_min[t])));
  }
}

// WeightKernels::dot_tile (kGrouped false: one token goes through rows_whole) and
// dot_tile_grouped: rows8 over whole groups of 8 rows, the step kernel for the rest.
template <bool kGrouped>
void dot_tile_rows8(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                    int n_x, float* out, size_t out_stride, int64_t n) {
  using S = std::conditional_t<kGrouped, StepGrouped, Step>;
  if (!kGrouped && n_x == 1) {
    dot_tile_lanes<Step, 2, 2>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n);
    return;
  }
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(activations);
  int r = 0;
  for (; r + kRows8 <= n_w; r += kRows8)
    rows8<kGrouped>(w + size_t(r) * w_row_bytes, w_row_bytes, a, a_row_bytes, n_x, out + r, out_stride, n);
  if (r < n_w)
    dot_tile_lanes<S, 2, 2>(w + size_t(r) * w_row_bytes, w_row_bytes, n_w - r, a, a_row_bytes, n_x, out + r,
                            out_stride, n);
}

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t b = 0; b < n / quant::kQKK; ++b, p += sizeof(quant::BlockQ4_K)) {
    const auto& blk = *reinterpret_cast<const quant::BlockQ4_K*>(p);
    const float d = half(blk.d), dmin = half(blk.dmin);
    const quant::KScales s = quant::unpack_k_scales(blk.scales);
    WtKOffset w;
    load_k_nibbles(p + offsetof(quant::BlockQ4_K, qs), w);
    for (int j = 0; j < 8; ++j)
      store_sub_block(dst + b * quant::kQKK + 32 * j, w.q[j], d * float(s.sc[j]), dmin * float(s.mn[j]));
  }
}

constexpr int kTileW = kRows8, kTileX = 4;

}  // namespace

extern const WeightKernels kQ4_K = {quant::DType::q4_k, quant::DType::q8_k, quantize_q8_k, dot<Step>,
                                    dot_tile_rows8<false>, dequantize, kTileW, kTileX, {}, dot_tile_rows8<true>};

}  // namespace ember::cpu::EMBER_AVX2_NS
