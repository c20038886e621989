// AVX-512 kernels of Q6_K weights with Q8_K activations, in llama.cpp's summation
// order (quant/lanes.hpp). Codes are used unsigned (0..63); the offset 32 goes
// through 32 * (pair sums of the activation codes), per int32 lane as llama.cpp does.
#include "cpu/kernels/avx512/lanes.hpp"
#include "cpu/kernels/avx512/blocks256.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::avx512 {
namespace {

// Codes of one half (128 values) of a super-block: layout in lib/quant/blocks.hpp.
inline void unpack_half(const std::byte* ql, const std::byte* qh, __m512i& first, __m512i& second) {
  const __m512i low = _mm512_loadu_si512(ql);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
  // Bytes 0-31: qh, bytes 32-63: qh >> 2, so bits 0-1 and 4-5 of each byte are the high
  // bits of values l, 32 + l (first) and 64 + l, 96 + l (second).
  const __m512i high = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
  const __m512i nibble = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
  first = _mm512_or_si512(_mm512_and_si512(low, nibble), _mm512_and_si512(_mm512_slli_epi16(high, 4), bits45));
  second = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(low, 4), nibble), _mm512_and_si512(high, bits45));
}

inline __m512i chunk_scales(__m512i sc16, int c) {
  const __m512i index = _mm512_set_epi16(
      short(4 * c + 3), short(4 * c + 3), short(4 * c + 3), short(4 * c + 3), short(4 * c + 3), short(4 * c + 3),
      short(4 * c + 3), short(4 * c + 3), short(4 * c + 2), short(4 * c + 2), short(4 * c + 2), short(4 * c + 2),
      short(4 * c + 2), short(4 * c + 2), short(4 * c + 2), short(4 * c + 2), short(4 * c + 1), short(4 * c + 1),
      short(4 * c + 1), short(4 * c + 1), short(4 * c + 1), short(4 * c + 1), short(4 * c + 1), short(4 * c + 1),
      short(4 * c), short(4 * c), short(4 * c), short(4 * c), short(4 * c), short(4 * c), short(4 * c), short(4 * c));
  return _mm512_permutexvar_epi16(index, sc16);
}

// llama.cpp's order (quant/lanes.hpp): one super-block per step, eight float lanes.

struct ActLanesQ6 {
  const std::byte* qs;  // 256 codes, read when used
  __m512i q8s[4];       // 32 * (sum of each code pair) of values 64c .. 64c + 63, int16
  float d;

  static ActLanesQ6 load(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ8_K);
    ActLanesQ6 a;
    a.qs = b + offsetof(quant::BlockQ8_K, qs);
    a.d = load_f32(b);
    for (int c = 0; c < 4; ++c)
      a.q8s[c] = _mm512_maddubs_epi16(_mm512_set1_epi8(32), _mm512_loadu_si512(a.qs + 64 * c));
    return a;
  }
};

struct WtLanesQ6 {
  __m512i q[4];   // codes of values 64c .. 64c + 63 (0..63)
  __m512i sc[4];  // 16-bit scales: 128-bit lane k of sc[c] holds sc[4c + k]
  float d;
};

inline WtLanesQ6 load_q6_lanes(const std::byte* row, int64_t s) {
  const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ6_K);
  WtLanesQ6 w;
  w.d = _cvtsh_ss(load_u16(b + offsetof(quant::BlockQ6_K, d)));
  const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + offsetof(quant::BlockQ6_K, scales)));
  const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc8));
  for (int c = 0; c < 4; ++c) w.sc[c] = chunk_scales(sc, c);
  const std::byte* ql = b + offsetof(quant::BlockQ6_K, ql);
  const std::byte* qh = b + offsetof(quant::BlockQ6_K, qh);
  unpack_half(ql, qh, w.q[0], w.q[1]);
  unpack_half(ql + 64, qh + 32, w.q[2], w.q[3]);
  return w;
}

struct StepLanesQ6 {
  static constexpr int kStep = quant::kQKK;
  using Act = ActLanesQ6;
  using Wt = WtLanesQ6;
  using Acc = __m256;
  static Acc zero() { return _mm256_setzero_ps(); }
  static Act load_act(const std::byte* a, int64_t s) { return Act::load(a, s); }
  static Wt load_w(const std::byte* w, int64_t s) { return load_q6_lanes(w, s); }
  // Lane l of the 16 int32 lanes sums values 64c + 4l .. 4l + 3, i.e. ggml's lane l mod 8.
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    __m512i sum = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      const __m512i p16 = _mm512_sub_epi16(_mm512_maddubs_epi16(w.q[c], _mm512_loadu_si512(a.qs + 64 * c)), a.q8s[c]);
      sum = _mm512_dpwssd_epi32(sum, p16, w.sc[c]);
    }
    const __m256i lanes = _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(a.d * w.d), _mm256_cvtepi32_ps(lanes), acc);
  }
  static float reduce(const Acc& acc) { return hsum8(acc); }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

// Batches: two tokens per 512-bit register, as the 32-value formats (lanes.hpp). A
// prepared pair holds both tokens' codes of each 32-value chunk and their pair sums
// times 32 (the code offset); weight chunks are broadcast to both halves.
struct PairQ6 {
  __m512i y[8];    // chunk c: token 0's codes in the low half, token 1's in the high half
  __m512i q8s[8];  // 32 * (sum of each code pair), int16
  __m512 d;

  static PairQ6 load(const std::byte* row0, const std::byte* row1, int64_t s) {
    const std::byte* b0 = row0 + size_t(s) * sizeof(quant::BlockQ8_K);
    const std::byte* b1 = row1 + size_t(s) * sizeof(quant::BlockQ8_K);
    const std::byte* q0 = b0 + offsetof(quant::BlockQ8_K, qs);
    const std::byte* q1 = b1 + offsetof(quant::BlockQ8_K, qs);
    PairQ6 p;
    for (int c = 0; c < 8; ++c) {
      p.y[c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q0 + 32 * c))),
                                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q1 + 32 * c)), 1);
      p.q8s[c] = _mm512_maddubs_epi16(_mm512_set1_epi8(32), p.y[c]);
    }
    p.d = _mm512_insertf32x8(_mm512_set1_ps(load_f32(b0)), _mm256_set1_ps(load_f32(b1)), 1);
    return p;
  }
};

template <int NW, int NP>
void tile_q6x2(const std::byte* w, size_t w_row_bytes, const PairQ6* pairs, int64_t n_blocks, float* out,
               size_t out_stride) {
  __m512 acc[NW][NP];
  for (int r = 0; r < NW; ++r)
    for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n_blocks; ++s) {
    for (int r = 0; r < NW; ++r) {
      const WtLanesQ6 wt = load_q6_lanes(w + size_t(r) * w_row_bytes, s);
      __m512i sum[NP];
      for (int p = 0; p < NP; ++p) sum[p] = _mm512_setzero_si512();
      for (int c = 0; c < 8; ++c) {
        // Chunk c is the low (even c) or high (odd c) half of register c / 2.
        const __m512i q = c % 2 ? _mm512_shuffle_i64x2(wt.q[c / 2], wt.q[c / 2], 0xee)
                                : _mm512_shuffle_i64x2(wt.q[c / 2], wt.q[c / 2], 0x44);
        const __m512i sc = c % 2 ? _mm512_shuffle_i64x2(wt.sc[c / 2], wt.sc[c / 2], 0xee)
                                 : _mm512_shuffle_i64x2(wt.sc[c / 2], wt.sc[c / 2], 0x44);
        for (int p = 0; p < NP; ++p) {
          const PairQ6& a = pairs[size_t(p) * size_t(n_blocks) + size_t(s)];
          sum[p] = _mm512_dpwssd_epi32(sum[p], _mm512_sub_epi16(_mm512_maddubs_epi16(q, a.y[c]), a.q8s[c]), sc);
        }
      }
      const __m512 wd = _mm512_set1_ps(wt.d);
      for (int p = 0; p < NP; ++p) {
        const PairQ6& a = pairs[size_t(p) * size_t(n_blocks) + size_t(s)];
        acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(a.d, wd), _mm512_cvtepi32_ps(sum[p]), acc[r][p]);
      }
    }
  }
  for (int r = 0; r < NW; ++r)
    for (int p = 0; p < NP; ++p) {
      out[size_t(2 * p) * out_stride + size_t(r)] = hsum8(_mm512_castps512_ps256(acc[r][p]));
      out[size_t(2 * p + 1) * out_stride + size_t(r)] = hsum8(_mm512_extractf32x8_ps(acc[r][p], 1));
    }
}

struct Q6Tile {
  using Fn = void (*)(const std::byte*, size_t, const PairQ6*, int64_t, float*, size_t);
  template <int R, int P>
  static void run(const std::byte* w, size_t w_row_bytes, const PairQ6* pairs, int64_t n_blocks, float* out,
                  size_t out_stride) {
    tile_q6x2<R, P>(w, w_row_bytes, pairs, n_blocks, out, out_stride);
  }
};

// WeightKernels::dot_tile in llama.cpp's order (see dot_tile_pairs).
void dot_tile_q6(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                 int n_x, float* out, size_t out_stride, int64_t n) {
  dot_tile_pairs<PairQ6, Q6Tile, StepLanesQ6, 4, 4>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out,
                                                    out_stride, n);
}

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t b = 0; b < n / quant::kQKK; ++b, p += sizeof(quant::BlockQ6_K)) {
    const auto& blk = *reinterpret_cast<const quant::BlockQ6_K*>(p);
    const float d = _cvtsh_ss(blk.d);
    __m512i q[4];
    unpack_half(p, p + 128, q[0], q[1]);
    unpack_half(p + 64, p + 160, q[2], q[3]);
    alignas(64) uint8_t codes[quant::kQKK];
    for (int c = 0; c < 4; ++c) _mm512_store_si512(codes + 64 * c, q[c]);
    for (int j = 0; j < 16; ++j) {
      // Reference order: (d * sc) * (q - 32).
      const __m512 scale = _mm512_set1_ps(d * float(blk.scales[j]));
      const __m512i wide = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(codes + 16 * j)));
      const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(wide, _mm512_set1_epi32(32)));
      _mm512_storeu_ps(dst + b * quant::kQKK + 16 * j, _mm512_mul_ps(scale, v));
    }
  }
}

constexpr int kLanesW = 2, kLanesX = 8;

}  // namespace

extern const WeightKernels kQ6_K = {quant::DType::q6_k, quant::DType::q8_k, quantize_q8_k, dot<StepLanesQ6>,
                                    dot_tile_q6, dequantize, kLanesW, kLanesX, {}};

}  // namespace ember::cpu::avx512
