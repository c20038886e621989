// AVX-512 kernels of Q4_G128 and Q4_G64 weights (x = d * q + m per group of G values,
// lib/quant/q4_g.cpp) with Q8_1 activations.
//
// One token on few rows (dot, and the rows past a call's last group of 16): Q4_1's
// step (blocks32.hpp), two 32-value sub-blocks of a group per register.
// Every other call takes 16 weight rows per register, one int32 lane per row, so the
// float work of a sub-block (one FMA) and of a group's offset (one more) serves 16 rows:
//   rows16_g     batches: the codes of 16 rows gathered a dword per row, once per
//                sub-block, and reused by up to 32 tokens;
//   rows16_g_one one token: contiguous loads of each row's group, and a transposing
//                tree of adds (rows16.hpp) turning them into lane = row.
// Both add, per output and group, m * (sum of the activation sums) and then each
// sub-block's fma(float(integer sum), d * d_act, acc) in order, with exact integer
// sums, so a row's result does not depend on the tokens beside it and the path serves
// backend::SumOrder::batch_invariant too.
#include "cpu/kernels/avx512/blocks32.hpp"
#include "cpu/kernels/avx512/rows16.hpp"
#include "cpu/kernels/avx512/rows8_repacked.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::avx512 {
namespace {

constexpr size_t kActBlock = sizeof(quant::BlockQ8_1);

template <int G>
struct Q4G {
  static constexpr int kSub = G / quant::kQK;
  static constexpr size_t kGroupBytes = 4 + G / 2;
  static constexpr size_t kBlockBytes = kGroupBytes / kSub;  // per 32 values (tails: blocks32.hpp)
  // Step s: values 64s .. 64s + 63 (sub-blocks 2s and 2s + 1 of their group).
  static WtCodesMin load(const std::byte* row, int64_t s) {
    const int64_t first = 2 * s;
    const std::byte* g = row + size_t(first / kSub) * kGroupBytes;
    const std::byte* codes = g + 4 + 16 * size_t(first % kSub);
    return {nibbles_split(codes, codes + 16), _mm512_set1_ps(_cvtsh_ss(load_u16(g))),
            _mm512_set1_ps(_cvtsh_ss(load_u16(g + 2)) * 0.125f)};
  }
  static float ref_dot(const void* w, const void* a, int64_t n) {
    return G == 128 ? quant::ref::dot_q4_g128(w, a, n) : quant::ref::dot_q4_g64(w, a, n);
  }
};

// The packed activation row: the Q8_1 blocks as they are, then the blocks' scales d as
// f32, then per group the f32 sum of its sub-blocks' s.
inline size_t scales_at(int64_t n) { return size_t(n / quant::kQK) * kActBlock; }
template <int G>
size_t packed_row_bytes(int64_t n) {
  return scales_at(n) + size_t(n / quant::kQK) * 4 + size_t(n / G) * 4;
}
template <int G>
void pack(const void* activations, void* packed, int64_t n) {
  const int64_t nb = n / quant::kQK;
  const auto* a = static_cast<const std::byte*>(activations);
  auto* p = static_cast<std::byte*>(packed);
  std::memcpy(p, a, size_t(nb) * kActBlock);
  auto* d = reinterpret_cast<float*>(p + scales_at(n));
  float* s = d + nb;
  for (int64_t g = 0; g < n / G; ++g) {
    float sum = 0.0f;
    for (int j = 0; j < G / quant::kQK; ++j) {
      const std::byte* b = a + size_t(g * (G / quant::kQK) + j) * kActBlock;
      d[g * (G / quant::kQK) + j] = _cvtsh_ss(load_u16(b));
      sum += _cvtsh_ss(load_u16(b + 2));
    }
    s[g] = sum;
  }
}

// d and m of 16 rows' groups at `group` (f16 pairs at the start of each group).
inline void gather_dm(const std::byte* group, __m512i rows, __m512& d, __m512& m) {
  const __m512i dm = _mm512_i32gather_epi32(rows, group, 1);
  d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
  m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
}

template <int G>
void rows16_g(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, int n_x, float* out,
              size_t out_stride, int64_t n) {
  using W = Q4G<G>;
  constexpr int kTokens = 32;
  const __m512i rows = row_offsets16(w_row_bytes);
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  const int64_t nb = n / quant::kQK, ng = n / G;
  const size_t d_at = scales_at(n);
  for (int t0 = 0; t0 < n_x; t0 += kTokens) {
    const int nt = n_x - t0 < kTokens ? n_x - t0 : kTokens;
    __m512 acc[kTokens];
    for (int t = 0; t < nt; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; ++g) {
      const std::byte* gb = w + size_t(g) * W::kGroupBytes;
      __m512 d, m;
      gather_dm(gb, rows, d, m);
      for (int t = 0; t < nt; ++t) {
        const auto* s_act = reinterpret_cast<const float*>(a + size_t(t0 + t) * a_row_bytes + d_at) + nb;
        acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(s_act[g]), acc[t]);
      }
      for (int j = 0; j < W::kSub; ++j) {
        __m512i q[8];
        for (int k = 0; k < 4; ++k) {
          const __m512i v = _mm512_i32gather_epi32(rows, gb + 4 + 16 * j + 4 * k, 1);
          q[k] = _mm512_and_si512(v, nibble);
          q[k + 4] = _mm512_and_si512(_mm512_srli_epi32(v, 4), nibble);
        }
        const int64_t b = g * W::kSub + j;
        for (int t = 0; t < nt; ++t) {
          const std::byte* row = a + size_t(t0 + t) * a_row_bytes;
          const std::byte* y = row + size_t(b) * kActBlock + 4;
          const auto* d_act = reinterpret_cast<const float*>(row + d_at);
          const __m512i s = dot_dwords8(_mm512_setzero_si512(), q, y);
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, _mm512_set1_ps(d_act[b])), acc[t]);
        }
      }
    }
    for (int t = 0; t < nt; ++t) _mm512_storeu_ps(out + size_t(t0 + t) * out_stride, acc[t]);
  }
}

// out[0 .. 16) for one token (packed row `a`) and the 16 rows at w: rows16_g's bits
// from contiguous loads (two sub-blocks of a row per register, split order).
template <int G>
void rows16_g_one(const std::byte* w, size_t w_row_bytes, const std::byte* a, float* out, int64_t n) {
  using W = Q4G<G>;
  const __m512i rows = row_offsets16(w_row_bytes);
  const int64_t nb = n / quant::kQK, ng = n / G;
  const auto* d_act = reinterpret_cast<const float*>(a + scales_at(n));
  const float* s_act = d_act + nb;
  const std::byte* ahead = w + 16 * w_row_bytes;
  const size_t lines = (16 * w_row_bytes + 63) / 64;
  size_t prefetched = 0;
  __m512 acc = _mm512_setzero_ps();
  for (int64_t g = 0; g < ng; ++g) {
    const std::byte* gb = w + size_t(g) * W::kGroupBytes;
    __m512 d, m;
    gather_dm(gb, rows, d, m);
    acc = _mm512_fmadd_ps(m, _mm512_set1_ps(s_act[g]), acc);
    const size_t end = lines * size_t(g + 1) / size_t(ng);
    for (int j = 0; j < W::kSub; j += 2) {
      const int64_t b = g * W::kSub + j;
      const std::byte* ab = a + size_t(b) * kActBlock + 4;
      const __m512i y = load_split(ab, ab + kActBlock);
      __m512i v[16];
      for (int r = 0; r < 16; ++r) {
        const std::byte* codes = gb + size_t(r) * w_row_bytes + 4 + 16 * j;
        v[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), nibbles_split(codes, codes + 16), y);
      }
      for (; prefetched < end; ++prefetched) __builtin_prefetch(ahead + 64 * prefetched);
      __m512i s[2];
      reduce_rows16<true>(v, s[0], s[1]);
      for (int k = 0; k < 2; ++k)
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[k]), _mm512_mul_ps(d, _mm512_set1_ps(d_act[b + k])), acc);
    }
  }
  _mm512_storeu_ps(out, acc);
}

template <int G>
using Step = StepQ8_1<Q4G<G>>;

// The rows8 layout's format description (rows8_repacked.hpp): one block is one group.
template <int G>
struct Rows8 {
  static constexpr size_t kBlockBytes = Q4G<G>::kGroupBytes;
  static constexpr bool kMin = true;
  static constexpr int kOffset = 0, kSub = G / quant::kQK;
};

template <int G>
void dot_tile_rows16_g(const void* weights, size_t w_row_bytes, int n_w, const void* packed, size_t p_row_bytes,
                       int n_x, float* out, size_t out_stride, int64_t n) {
  const auto* w = static_cast<const std::byte*>(weights);
  const auto* a = static_cast<const std::byte*>(packed);
  int r = 0;
  for (; r + 16 <= n_w; r += 16)
    if (n_x == 1)
      rows16_g_one<G>(w + size_t(r) * w_row_bytes, w_row_bytes, a, out + r, n);
    else
      rows16_g<G>(w + size_t(r) * w_row_bytes, w_row_bytes, a, p_row_bytes, n_x, out + r, out_stride, n);
  // The packed rows start with their Q8_1 blocks: the per-token step reads them in place.
  if (r < n_w)
    dot_tile<Step<G>, 4, 4>(w + size_t(r) * w_row_bytes, w_row_bytes, n_w - r, a, p_row_bytes, n_x, out + r,
                            out_stride, n);
}

template <int G>
void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t g = 0; g < n / G; ++g, p += Q4G<G>::kGroupBytes)
    for (int j = 0; j < G / quant::kQK; ++j)
      store_offset(dst + g * G + j * quant::kQK, nibbles_32(p + 4 + 16 * j), _cvtsh_ss(load_u16(p)),
                   _cvtsh_ss(load_u16(p + 2)));
}

constexpr int kTileW = 16, kTileX = 4;  // 16: chunks of whole rows16 groups

template <quant::DType T, int G>
constexpr WeightKernels kernels() {
  constexpr WeightKernels::Packed kRows16 = {packed_row_bytes<G>, pack<G>, dot_tile_rows16_g<G>, 16, 4, true};
  constexpr WeightKernels::Packed kRows16Prefill = {packed_row_bytes<G>, pack<G>, dot_tile_rows16_g<G>, 16, 4, false};
  return {T,       quant::DType::q8_1, quantize_q8_1,  dot<Step<G>>, dot_tile<Step<G>, 4, 4>, dequantize<G>,
          kTileW,  kTileX,             kRows16Prefill, nullptr,      kRows16,
          nullptr, {dot_tile_rows8_repacked<Rows8<G>>, 4}};
}

}  // namespace

extern const WeightKernels kQ4_G128 = kernels<quant::DType::q4_g128, 128>();
extern const WeightKernels kQ4_G64 = kernels<quant::DType::q4_g64, 64>();

}  // namespace ember::cpu::avx512
