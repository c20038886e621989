// AVX2 kernels of Q6_K weights with Q8_K activations (see blocks256.hpp).
// Codes are used unsigned (0..63); the offset 32 goes through 32 * (pair sums of the
// activation codes), per int32 lane as llama.cpp does.
#include "cpu/kernels/avx2/blocks256.hpp"
#include "cpu/kernels/avx2/rows8.hpp"
#include "cpu/kernels/tile.hpp"
#include "quant/formats.hpp"

namespace ember::cpu::EMBER_AVX2_NS {
namespace {

struct WtQ6_K {
  __m256i q[8];   // codes of values 32k .. 32k + 31 (sub-blocks 2k, 2k + 1)
  __m128i sc8;    // the 16 int8 scales
  float d;
};

// Codes of a super-block, in value order (bit layout in lib/quant/blocks.hpp). The
// 16-bit shifts move bits within each byte; what they carry across bytes is masked off.
inline void unpack_codes(const std::byte* block, __m256i* q) {
  const __m256i nibble = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
  for (int h = 0; h < 2; ++h) {
    const __m256i l0 = load256(block + 64 * h), l1 = load256(block + 64 * h + 32);
    const __m256i hb = load256(block + 128 + 32 * h);
    q[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, nibble), _mm256_and_si256(_mm256_slli_epi16(hb, 4), bits45));
    q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, nibble), _mm256_and_si256(_mm256_slli_epi16(hb, 2), bits45));
    q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), nibble), _mm256_and_si256(hb, bits45));
    q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), nibble),
                                   _mm256_and_si256(_mm256_srli_epi16(hb, 2), bits45));
  }
}

// int16 scales for chunk k: sc[2k] in the low 128-bit lane, sc[2k + 1] in the high one.
inline __m256i chunk_scales(__m128i sc8, int k) {
  const __m128i index = _mm_set_epi64x(0x0101010101010101ll * (2 * k + 1), 0x0101010101010101ll * (2 * k));
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, index));
}

struct Step {
  static constexpr int kStep = quant::kQKK;
  using Act = ActQ8_K;
  using Wt = WtQ6_K;
  using Acc = __m256;
  static Acc zero() { return _mm256_setzero_ps(); }
  static Act load_act(const std::byte* a, int64_t s) { return ActQ8_K::load(a, s); }
  static Wt load_w(const std::byte* row, int64_t s) {
    const std::byte* b = row + size_t(s) * sizeof(quant::BlockQ6_K);
    Wt w;
    w.d = half_at(b + offsetof(quant::BlockQ6_K, d));
    w.sc8 = load128(b + offsetof(quant::BlockQ6_K, scales));
    unpack_codes(b, w.q);
    return w;
  }
  // llama.cpp's order (quant/lanes.hpp): int32 lane m sums values 4m .. 4m + 3 of every
  // chunk, the offset 32 included, and the super-block adds it to float lane m.
  static void madd(Acc& acc, const Wt& w, const Act& a) {
    __m256i sum = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      const __m256i y = a.codes(k);
      const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(w.q[k], y), _mm256_maddubs_epi16(_mm256_set1_epi8(32), y));
      sum = madd16_add(sum, p16, chunk_scales(w.sc8, k));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(a.d * w.d), _mm256_cvtepi32_ps(sum), acc);
  }
  static float reduce(const Acc& acc) { return hsum(acc); }
  static float tail(const std::byte*, const std::byte*, int64_t, int64_t) { return 0.0f; }
};

// Batches, 8 weight rows at a time with one int32 lane per row (rows8.hpp), in
// llama.cpp's order: Step's eight float lanes m (values 4m .. 4m + 3 of every 32-value
// chunk) become eight registers over the rows, lanes[m] = fma(d_a * d_w, float(sum_m),
// lanes[m]) per super-block, added at the end as Lanes8::sum adds them. Per chunk k
// and dword m: vpmaddubsw of the rows' codes by the token's dword, minus the offset
// 32 * (pair sums of that dword, one vpmaddubsw per chunk), then vpmaddwd by the
// rows' scale of sub-block 2k + m / 4.
void rows8(const std::byte* w, size_t w_row_bytes, const std::byte* a, size_t a_row_bytes, int n_x, float* out,
           size_t out_stride, int64_t n) {
  constexpr size_t kBlock = sizeof(quant::BlockQ6_K), kActBlock = sizeof(quant::BlockQ8_K);
  const int64_t nb = n / quant::kQKK;
  for (int t0 = 0; t0 < n_x; t0 += kRows8Tokens) {
    const int nt = n_x - t0 < kRows8Tokens ? n_x - t0 : kRows8Tokens;
    alignas(32) float lanes[kRows8Tokens][8][8];  // [token][m][row]
    for (int t = 0; t < nt; ++t)
      for (int m = 0; m < 8; ++m) _mm256_store_ps(lanes[t][m], _mm256_setzero_ps());
    for (int64_t b = 0; b < nb; ++b) {
      const std::byte* wb = w + size_t(b) * kBlock;
      __m256i q[8][8];  // [chunk][dword], lane r: row r
      {
        __m256i codes[8][8];  // [row][chunk]
        for (int r = 0; r < 8; ++r) unpack_codes(wb + size_t(r) * w_row_bytes, codes[r]);
        for (int k = 0; k < 8; ++k) {
          __m256i in[8];
          for (int r = 0; r < 8; ++r) in[r] = codes[r][k];
          transpose_8x8(in, q[k]);
        }
      }
      alignas(32) int32_t sc[16][8];  // sc[j][r]: scale j of row r in both int16 halves
      for (int r = 0; r < 8; ++r) {
        const auto* s8 = reinterpret_cast<const int8_t*>(wb + size_t(r) * w_row_bytes + offsetof(quant::BlockQ6_K, scales));
        for (int j = 0; j < 16; ++j) sc[j][r] = int32_t(uint32_t(uint16_t(int16_t(s8[j]))) * 0x10001u);
      }
      const __m256 d = load_fp16_rows8(wb + offsetof(quant::BlockQ6_K, d), w_row_bytes);
      for (int t = 0; t < nt; ++t) {
        const std::byte* ab = a + size_t(t0 + t) * a_row_bytes + size_t(b) * kActBlock;
        const std::byte* qs = ab + offsetof(quant::BlockQ8_K, qs);
        const __m256 dd = _mm256_mul_ps(_mm256_set1_ps(load_f32(ab)), d);
        __m256i sum[8];
        for (int m = 0; m < 8; ++m) sum[m] = _mm256_setzero_si256();
        for (int k = 0; k < 8; ++k) {
          alignas(32) int32_t offset[8];  // 32 * (a0 + a1), 32 * (a2 + a3) of dword m, as int16 pairs
          _mm256_store_si256(reinterpret_cast<__m256i*>(offset),
                             _mm256_maddubs_epi16(_mm256_set1_epi8(32), load256(qs + 32 * k)));
          for (int m = 0; m < 8; ++m) {
            const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k][m], bcast32(qs + 32 * k + 4 * m)),
                                               _mm256_set1_epi32(offset[m]));
            const __m256i s = _mm256_load_si256(reinterpret_cast<const __m256i*>(sc[2 * k + m / 4]));
            sum[m] = madd16_add(sum[m], p, s);
          }
        }
        for (int m = 0; m < 8; ++m)
          _mm256_store_ps(lanes[t][m], _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(sum[m]), _mm256_load_ps(lanes[t][m])));
      }
    }
    for (int t = 0; t < nt; ++t) store_rows8(out + size_t(t0 + t) * out_stride, lanes8_sum_rows8(lanes[t]));
  }
}

// WeightKernels::dot_tile: one token with rows_whole, batches with rows8 over whole
// groups of 8 rows and the step kernel's tiles for the rest.
constexpr DotTileFn kPlain = dot_tile_lanes<Step, 2, 2>;
void dot_tile_rows8(const void* weights, size_t w_row_bytes, int n_w, const void* activations, size_t a_row_bytes,
                    int n_x, float* out, size_t out_stride, int64_t n) {
  if (n_x == 1) return kPlain(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n);
  const auto* a = static_cast<const std::byte*>(activations);
  over_row_groups<kPlain>(weights, w_row_bytes, n_w, activations, a_row_bytes, n_x, out, out_stride, n,
                          [&](const std::byte* w, float* o) { rows8(w, w_row_bytes, a, a_row_bytes, n_x, o, out_stride, n); });
}

void dequantize(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const std::byte*>(src);
  for (int64_t b = 0; b < n / quant::kQKK; ++b, p += sizeof(quant::BlockQ6_K)) {
    const auto& blk = *reinterpret_cast<const quant::BlockQ6_K*>(p);
    const float d = half(blk.d);
    __m256i q[8];
    unpack_codes(p, q);
    for (int k = 0; k < 8; ++k) {
      const __m128i halves[2] = {_mm256_castsi256_si128(q[k]), _mm256_extracti128_si256(q[k], 1)};
      for (int h = 0; h < 2; ++h) {
        // Reference order: (d * sc) * (q - 32).
        const __m256 scale = _mm256_set1_ps(d * float(blk.scales[2 * k + h]));
        for (int i = 0; i < 2; ++i) {
          const __m256i wide = _mm256_cvtepu8_epi32(i ? _mm_srli_si128(halves[h], 8) : halves[h]);
          const __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(wide, _mm256_set1_epi32(32)));
          _mm256_storeu_ps(dst + b * quant::kQKK + 32 * k + 16 * h + 8 * i, _mm256_mul_ps(scale, v));
        }
      }
    }
  }
}

constexpr int kTileW = kRows8, kTileX = 4;

}  // namespace

extern const WeightKernels kQ6_K = {quant::DType::q6_k, quant::DType::q8_k, quantize_q8_k, dot<Step>,
                                    dot_tile_rows8, dequantize, kTileW, kTileX, {}};

}  // namespace ember::cpu::EMBER_AVX2_NS
