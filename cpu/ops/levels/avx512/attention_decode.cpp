// The AVX-512 level's fused decode-attention kernels over F16 cache rows
// (OpKernels::scores_f16, pv_f16; attention_flash.cpp's lone-token path). They read the
// F16 rows where they lie (cache pages) and convert each chunk once for all the query
// heads of the group: no f32 copy of the tile, no call per row. head_dim must be a
// multiple of 16 (the caller checks).
//
// scores_f16 has two forms, chosen by the shape (both sum in f32, in their own order):
//  - keys across the lanes, for small heads and wide groups (head_dim <= 20 x group,
//    e.g. TinyLlama's 64 x 8): 32 keys at a time are transposed as F16 words in
//    registers (three in-lane unpack stages and a 2-source qword permute per 16 keys x
//    32 dims: 2 shuffles per 16-key vector of one dim) into a [head_dim][32 keys]
//    block on the stack; then each dim's 2 x 16 keys are converted once and every
//    query head adds q[g][d] times them with a broadcast FMA. 16 accumulators (8 heads
//    x 32 keys) hold the scores; no horizontal reduction at all.
//  - dims across the lanes (large heads, small groups, e.g. Gemma's 256 x 4): 16 keys
//    are converted into a 16 x head_dim f32 block; each query head takes one 16-lane
//    accumulator per key, reduced to the vector of 16 scores by a transposing tree of
//    shuffles (kernels/avx512/reduce16.hpp). The tree costs 45 operations
//    per head and 16 keys, the transpose 2 x head_dim: this form wins when the
//    accumulators see many FMAs before their reduction.
// pv_f16: blocks of kPvRows value rows; per column slice, 16 accumulators (8 heads x
// 32 columns or 4 x 64) stay in registers over the block, each converted value chunk
// feeds all the heads, and the probabilities come in as broadcasts.
// INT8 rows (KV_Q8_G32 / G64; scores_q8, pv_q8) take the same forms: the keys-across-
// lanes scores transpose 16 keys' codes per 32 dims as bytes (rows j and j + 8 in one
// register, three in-lane unpack stages and a qword permute), add q times the codes per
// block in 16-lane partials and multiply each partial by the 16 keys' block scales; the
// dims form decodes d * code into the f32 block. P.V decodes each row's 32-column slice
// once (exactly, d * code) for all the heads. INT4 rows (scores_q4, pv_q4; the stored,
// rotated values y = d * code + m) transpose their code bytes the same way, split the
// nibbles, and add each block's m times the query's block sum; always keys across the
// lanes.
#include <algorithm>
#include <cstring>

#include "cpu/kernels/avx512/reduce16.hpp"
#include "cpu/kernels/unroll.hpp"
#include "cpu/kernels/x86_intrinsics.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::avx512 {
namespace {

constexpr int kMaxHeadDim = 512;
constexpr int kPvRows = 32;

inline __m512 f16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// ---- scores, keys across the lanes ----

// 16 keys x 32 dims [c0, c0 + 32) of F16 rows (zeros past `valid` dims of the slice)
// transposed into `t`: 4 chunks of 64 bytes per 8-dim offset k (0..7), chunk (k, part)
// at t + (2 k + part) * 64 bytes holding dim c0 + 16 part + k for the 16 keys in order,
// then dim c0 + 16 part + 8 + k.
inline void transpose16x32(const uint16_t* const* rows, int c0, int valid, uint16_t* t) {
  const __mmask32 mask = valid >= 32 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << valid) - 1);
  __m512i r[16], a[16], b[16];
  for (int j = 0; j < 16; ++j) r[j] = _mm512_maskz_loadu_epi16(mask, rows[j] + c0);
  // Per 128-bit lane (8 dims): pairs of keys, then quads, then octets, at each dim.
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi16(r[2 * i], r[2 * i + 1]);      // keys 2i, 2i+1 at dims 0..3
    a[2 * i + 1] = _mm512_unpackhi_epi16(r[2 * i], r[2 * i + 1]);  // dims 4..7
  }
  // b[4 q + 2 h + e]: keys 4q..4q+3, dims (4 h + 2 e, 4 h + 2 e + 1) of the lane.
  for (int q = 0; q < 4; ++q)
    for (int h = 0; h < 2; ++h) {
      const __m512i x = a[4 * q + h], y = a[4 * q + 2 + h];
      b[4 * q + 2 * h] = _mm512_unpacklo_epi32(x, y);
      b[4 * q + 2 * h + 1] = _mm512_unpackhi_epi32(x, y);
    }
  // c[o][k]: keys 8o..8o+7 at dim k of each lane (lane L: dim c0 + 8 L + k).
  __m512i c[2][8];
  for (int o = 0; o < 2; ++o)
    for (int dp = 0; dp < 4; ++dp) {
      const __m512i x = b[8 * o + dp], y = b[8 * o + 4 + dp];
      c[o][2 * dp] = _mm512_unpacklo_epi64(x, y);
      c[o][2 * dp + 1] = _mm512_unpackhi_epi64(x, y);
    }
  const __m512i lanes01 = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
  const __m512i lanes23 = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  for (int k = 0; k < 8; ++k) {
    _mm512_store_si512(t + (2 * k) * 32, _mm512_permutex2var_epi64(c[0][k], lanes01, c[1][k]));
    _mm512_store_si512(t + (2 * k + 1) * 32, _mm512_permutex2var_epi64(c[0][k], lanes23, c[1][k]));
  }
}

// s[g][j0 .. j0 + 32) for G heads from the transposed block: t0 keys 0..15, t1 keys 16..31,
// each [hd / 32 slices][16 chunks of 32 words] (a 16-dim tail slice: its first 8 chunks... all
// 16 chunks written, the upper dims zero).
template <int G>
inline void scores_lanes(const float* q, int hd, const uint16_t* t0, const uint16_t* t1, __m512 scale,
                         float* s, int lds, __mmask16 m0, __mmask16 m1) {
  __m512 acc[G][2];
  for (int g = 0; g < G; ++g) acc[g][0] = acc[g][1] = _mm512_setzero_ps();
  for (int c0 = 0; c0 < hd; c0 += 32) {
    const uint16_t* u0 = t0 + c0 * 16;
    const uint16_t* u1 = t1 + c0 * 16;
    const int parts = hd - c0 >= 32 ? 2 : 1;
    for (int part = 0; part < parts; ++part)
      for (int k = 0; k < 8; ++k)
        for (int half = 0; half < 2; ++half) {
          const int d = c0 + 16 * part + 8 * half + k;
          const int off = (2 * k + part) * 32 + 16 * half;
          const __m512 k0 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(u0 + off)));
          const __m512 k1 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(u1 + off)));
          for (int g = 0; g < G; ++g) {
            const __m512 w = _mm512_set1_ps(q[g * hd + d]);
            acc[g][0] = _mm512_fmadd_ps(w, k0, acc[g][0]);
            acc[g][1] = _mm512_fmadd_ps(w, k1, acc[g][1]);
          }
        }
  }
  for (int g = 0; g < G; ++g) {
    _mm512_mask_storeu_ps(s + g * lds, m0, _mm512_mul_ps(scale, acc[g][0]));
    _mm512_mask_storeu_ps(s + g * lds + 16, m1, _mm512_mul_ps(scale, acc[g][1]));
  }
}

void scores_by_keys(const float* q, int group, int hd, const uint16_t* const* rows, int n, float scale, float* s,
                    int lds) {
  alignas(64) static const uint16_t zeros[kMaxHeadDim] = {};
  // Per 16 keys: [hd rounded up to 32][16] words.
  alignas(64) uint16_t t[2][kMaxHeadDim * 16];
  const __m512 scale_v = _mm512_set1_ps(scale);
  for (int j0 = 0; j0 < n; j0 += 32) {
    const int jn = std::min(32, n - j0);
    for (int half = 0; half < 2; ++half) {
      const uint16_t* r[16];
      for (int j = 0; j < 16; ++j) r[j] = 16 * half + j < jn ? rows[j0 + 16 * half + j] : zeros;
      for (int c0 = 0; c0 < hd; c0 += 32) transpose16x32(r, c0, std::min(32, hd - c0), t[half] + c0 * 16);
    }
    const auto lanes = [](int k) { return k >= 16 ? __mmask16(0xFFFF) : k <= 0 ? __mmask16(0) : __mmask16((1u << k) - 1); };
    const __mmask16 m0 = lanes(jn), m1 = lanes(jn - 16);
    float* sj = s + j0;
    int g = 0;
    for (; g + 8 <= group; g += 8) scores_lanes<8>(q + g * hd, hd, t[0], t[1], scale_v, sj + g * lds, lds, m0, m1);
    if (group - g >= 4) scores_lanes<4>(q + g * hd, hd, t[0], t[1], scale_v, sj + g * lds, lds, m0, m1), g += 4;
    if (group - g >= 2) scores_lanes<2>(q + g * hd, hd, t[0], t[1], scale_v, sj + g * lds, lds, m0, m1), g += 2;
    if (group - g >= 1) scores_lanes<1>(q + g * hd, hd, t[0], t[1], scale_v, sj + g * lds, lds, m0, m1);
  }
}

// ---- scores, dims across the lanes ----

// decode(j, dst) writes key j's hd values as f32 (zeros for j >= n handled here).
template <class Decode>
void scores_by_dims(const float* q, int group, int hd, int n, float scale, float* s, int lds, Decode decode) {
  alignas(64) float keys[16 * kMaxHeadDim];
  const __m512 scale_v = _mm512_set1_ps(scale);
  for (int j0 = 0; j0 < n; j0 += 16) {
    const int jn = std::min(16, n - j0);
    for (int j = 0; j < 16; ++j) {
      float* dst = keys + j * hd;
      if (j < jn) {
        decode(j0 + j, dst);
      } else {
        for (int d = 0; d < hd; d += 16) _mm512_store_ps(dst + d, _mm512_setzero_ps());
      }
    }
    const __mmask16 mask = jn == 16 ? __mmask16(0xFFFF) : __mmask16((1u << jn) - 1);
    for (int g = 0; g < group; ++g) {
      const float* qg = q + g * hd;
      __m512 acc[16];
      for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
      for (int d = 0; d < hd; d += 16) {
        const __m512 qv = _mm512_loadu_ps(qg + d);
        for (int j = 0; j < 16; ++j) acc[j] = _mm512_fmadd_ps(qv, _mm512_load_ps(keys + j * hd + d), acc[j]);
      }
      _mm512_mask_storeu_ps(s + g * lds + j0, mask, _mm512_mul_ps(scale_v, reduce16(acc)));
    }
  }
}

// ---- INT8 scores, keys across the lanes ----

// The codes of 16 keys x 32 dims (bytes [off, off + 32) of each row, zeros past the
// `bytes` mask) transposed into t:
// 8 chunks of 64 bytes, chunk k holding the 16 keys' codes (in key order, 16 bytes per
// dim) of dims 2k, 2k + 1, 16 + 2k, 17 + 2k (code_slot). Rows j and j + 8 share a
// register; three in-lane unpack stages, then one qword permute.
inline void transpose_codes(const uint8_t* const* rows, int off, uint8_t* t, __mmask32 bytes = 0xFFFFFFFFu) {
  __m512i r[8], a[8], b[8];
  for (int j = 0; j < 8; ++j)
    r[j] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_maskz_loadu_epi8(bytes, rows[j] + off)),
                              _mm256_maskz_loadu_epi8(bytes, rows[j + 8] + off), 1);
  // Per 128-bit lane (16 dims; lanes 2, 3: keys j + 8): pairs of keys at each dim.
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm512_unpacklo_epi8(r[2 * i], r[2 * i + 1]);      // dims 0..7 of the lane
    a[2 * i + 1] = _mm512_unpackhi_epi8(r[2 * i], r[2 * i + 1]);  // dims 8..15
  }
  // b[4 q + e]: keys 4q..4q+3 at dims 4e..4e+3 of the lane.
  for (int q = 0; q < 2; ++q)
    for (int h = 0; h < 2; ++h) {
      const __m512i x = a[4 * q + h], y = a[4 * q + 2 + h];
      b[4 * q + 2 * h] = _mm512_unpacklo_epi16(x, y);
      b[4 * q + 2 * h + 1] = _mm512_unpackhi_epi16(x, y);
    }
  // c[k]: 8 keys at dims 2k (qword 0 of each lane) and 2k + 1 (qword 1).
  const __m512i order = _mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7);
  for (int e = 0; e < 4; ++e) {
    const __m512i c0 = _mm512_unpacklo_epi32(b[e], b[4 + e]), c1 = _mm512_unpackhi_epi32(b[e], b[4 + e]);
    _mm512_store_si512(t + (2 * e) * 64, _mm512_permutexvar_epi64(order, c0));
    _mm512_store_si512(t + (2 * e + 1) * 64, _mm512_permutexvar_epi64(order, c1));
  }
}

// Where transpose_codes puts dim d (0..31) of a 32-dim slice.
constexpr int code_slot(int d) { return d < 16 ? d / 2 * 64 + d % 2 * 16 : (d - 16) / 2 * 64 + (2 + d % 2) * 16; }

// s[g][j0 .. j0 + 16) for G heads from the transposed codes t ([hd / 32][512 bytes]) and
// the 16 keys' scales dsc ([hd / gsize][16]): per block, 16-lane partial sums over its
// dims (broadcast q times the converted codes), then times the block's scales.
template <int G>
inline void q8_lanes(const float* q, int hd, int gsize, const uint8_t* t, const float* dsc, __m512 scale, float* s,
                     int lds, __mmask16 mask) {
  __m512 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
  for (int b = 0; b < hd / gsize; ++b) {
    __m512 part[G];
    for (int g = 0; g < G; ++g) part[g] = _mm512_setzero_ps();
    for (int c0 = b * gsize; c0 < (b + 1) * gsize; c0 += 32) {
      const uint8_t* u = t + c0 * 16;
      for (int d = 0; d < 32; ++d) {
        const __m512 x = _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(u + code_slot(d)))));
        for (int g = 0; g < G; ++g) part[g] = _mm512_fmadd_ps(_mm512_set1_ps(q[g * hd + c0 + d]), x, part[g]);
      }
    }
    const __m512 dv = _mm512_load_ps(dsc + b * 16);
    for (int g = 0; g < G; ++g) acc[g] = _mm512_fmadd_ps(part[g], dv, acc[g]);
  }
  for (int g = 0; g < G; ++g) _mm512_mask_storeu_ps(s + g * lds, mask, _mm512_mul_ps(scale, acc[g]));
}

void scores_q8_by_keys(const float* q, int group, int hd, int gsize, const uint8_t* const* rows, int n, float scale,
                       float* s, int lds) {
  alignas(64) static const uint8_t zeros[kMaxHeadDim + 64] = {};  // a row of zero scales and codes
  alignas(64) uint8_t t[kMaxHeadDim * 16];
  alignas(64) float dsc[kMaxHeadDim / 32 * 16];
  const int block_bytes = gsize + 2, blocks = hd / gsize;
  const __m512 scale_v = _mm512_set1_ps(scale);
  for (int j0 = 0; j0 < n; j0 += 16) {
    const int jn = std::min(16, n - j0);
    const uint8_t* r[16];
    for (int j = 0; j < 16; ++j) r[j] = j < jn ? rows[j0 + j] : zeros;
    for (int b = 0; b < blocks; ++b) {
      for (int h = 0; h < gsize; h += 32) transpose_codes(r, b * block_bytes + 2 + h, t + (b * gsize + h) * 16);
      alignas(32) uint16_t sc[16];
      for (int j = 0; j < 16; ++j) std::memcpy(&sc[j], r[j] + b * block_bytes, 2);
      _mm512_store_ps(dsc + b * 16, _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sc))));
    }
    const __mmask16 mask = jn == 16 ? __mmask16(0xFFFF) : __mmask16((1u << jn) - 1);
    float* sj = s + j0;
    int g = 0;
    for (; g + 8 <= group; g += 8) q8_lanes<8>(q + g * hd, hd, gsize, t, dsc, scale_v, sj + g * lds, lds, mask);
    if (group - g >= 4) q8_lanes<4>(q + g * hd, hd, gsize, t, dsc, scale_v, sj + g * lds, lds, mask), g += 4;
    if (group - g >= 2) q8_lanes<2>(q + g * hd, hd, gsize, t, dsc, scale_v, sj + g * lds, lds, mask), g += 2;
    if (group - g >= 1) q8_lanes<1>(q + g * hd, hd, gsize, t, dsc, scale_v, sj + g * lds, lds, mask);
  }
}

// ---- P.V ----

// acc[g][x] (G heads x NX 16-column chunks, columns [c0, c0 + 16 NX)) += p[g][j] v_j over
// the block's rows.
template <int G, int NX>
inline void pv_slice(const float* p, int ldp, int hd, const uint16_t* const* rows, int n, float* acc, int c0) {
  __m512 a[G][NX];
  unroll<G>([&](auto g) {
    unroll<NX>([&](auto x) { a[g][x] = _mm512_loadu_ps(acc + g * hd + c0 + 16 * x); });
  });
  for (int j = 0; j < n; ++j) {
    __m512 v[NX];
    unroll<NX>([&](auto x) { v[x] = f16x16(rows[j] + c0 + 16 * x); });
    unroll<G>([&](auto g) {
      const __m512 w = _mm512_set1_ps(p[g * ldp + j]);
      unroll<NX>([&](auto x) { a[g][x] = _mm512_fmadd_ps(w, v[x], a[g][x]); });
    });
  }
  unroll<G>([&](auto g) {
    unroll<NX>([&](auto x) { _mm512_storeu_ps(acc + g * hd + c0 + 16 * x, a[g][x]); });
  });
}

template <int G>
inline void pv_heads(const float* p, int ldp, int hd, const uint16_t* const* rows, int n, float* acc) {
  constexpr int kWide = G >= 8 ? 2 : 4;  // 16 accumulators
  int c0 = 0;
  for (; c0 + 16 * kWide <= hd; c0 += 16 * kWide) pv_slice<G, kWide>(p, ldp, hd, rows, n, acc, c0);
  for (; c0 < hd; c0 += 16) pv_slice<G, 1>(p, ldp, hd, rows, n, acc, c0);
}

// acc[g][x] (G heads x 2 16-column chunks, columns [c0, c0 + 32) of one block) += p[g][j]
// v_j over the block's INT8 rows: the codes converted and scaled (exactly, d * code)
// once per row for all the heads.
template <int G>
inline void pv_q8_slice(const float* p, int ldp, int hd, int gsize, const uint8_t* const* rows, int n, float* acc,
                        int c0) {
  const int block_off = c0 / gsize * (gsize + 2), code_off = block_off + 2 + c0 % gsize;
  __m512 a[G][2];
  unroll<G>([&](auto g) {
    unroll<2>([&](auto x) { a[g][x] = _mm512_loadu_ps(acc + g * hd + c0 + 16 * x); });
  });
  for (int j = 0; j < n; ++j) {
    uint16_t h;
    std::memcpy(&h, rows[j] + block_off, 2);
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(h));
    __m512 v[2];
    for (int x = 0; x < 2; ++x)
      v[x] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j] + code_off + 16 * x)))));
    unroll<G>([&](auto g) {
      const __m512 w = _mm512_set1_ps(p[g * ldp + j]);
      unroll<2>([&](auto x) { a[g][x] = _mm512_fmadd_ps(w, v[x], a[g][x]); });
    });
  }
  unroll<G>([&](auto g) {
    unroll<2>([&](auto x) { _mm512_storeu_ps(acc + g * hd + c0 + 16 * x, a[g][x]); });
  });
}

template <int G>
inline void pv_q8_heads(const float* p, int ldp, int hd, int gsize, const uint8_t* const* rows, int n, float* acc) {
  for (int c0 = 0; c0 < hd; c0 += 32) pv_q8_slice<G>(p, ldp, hd, gsize, rows, n, acc, c0);
}

// ---- INT4 (KV_Q4_G32 / G64, stored rotated: y = d * code + m per block) ----

// The low and high nibbles of 16 bytes (16 keys) as f32.
inline void nibbles16(const uint8_t* p, __m512& lo, __m512& hi) {
  const __m128i x = _mm_load_si128(reinterpret_cast<const __m128i*>(p)), mask = _mm_set1_epi8(15);
  lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(x, mask)));
  hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(x, 4), mask)));
}

// s[g][j0 .. j0 + 16) for G heads from the transposed code bytes t ([blocks][512 bytes]:
// the block's gsize / 2 bytes as transpose_codes lays them out), the keys' block scales
// dsc and offsets msc ([blocks][16]) and the heads' block sums of q, qsum[g][b]:
// sum_b d_b (q_b . codes_b) + m_b sum(q_b).
template <int G>
inline void q4_lanes(const float* q, int hd, int gsize, const uint8_t* t, const float* dsc, const float* msc,
                     const float* qsum, __m512 scale, float* s, int lds, __mmask16 mask) {
  const int half = gsize / 2, blocks = hd / gsize;
  __m512 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    __m512 part[G];
    for (int g = 0; g < G; ++g) part[g] = _mm512_setzero_ps();
    const uint8_t* u = t + b * 512;
    for (int e = 0; e < half; ++e) {
      __m512 lo, hi;
      nibbles16(u + code_slot(e), lo, hi);
      const int d = b * gsize + e;  // the low nibble's dim; the high one's is d + half
      for (int g = 0; g < G; ++g) {
        part[g] = _mm512_fmadd_ps(_mm512_set1_ps(q[g * hd + d]), lo, part[g]);
        part[g] = _mm512_fmadd_ps(_mm512_set1_ps(q[g * hd + d + half]), hi, part[g]);
      }
    }
    const __m512 dv = _mm512_load_ps(dsc + b * 16), mv = _mm512_load_ps(msc + b * 16);
    for (int g = 0; g < G; ++g) {
      acc[g] = _mm512_fmadd_ps(part[g], dv, acc[g]);
      acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(qsum[g * blocks + b]), mv, acc[g]);
    }
  }
  for (int g = 0; g < G; ++g) _mm512_mask_storeu_ps(s + g * lds, mask, _mm512_mul_ps(scale, acc[g]));
}

template <int G>
inline void q4_heads(const float* q, int hd, int gsize, const uint8_t* t, const float* dsc, const float* msc,
                     __m512 scale, float* s, int lds, __mmask16 mask) {
  const int blocks = hd / gsize;
  float qsum[G * kMaxHeadDim / 32];
  for (int g = 0; g < G; ++g)
    for (int b = 0; b < blocks; ++b) {
      __m512 sum = _mm512_loadu_ps(q + g * hd + b * gsize);
      for (int i = 16; i < gsize; i += 16) sum = _mm512_add_ps(sum, _mm512_loadu_ps(q + g * hd + b * gsize + i));
      qsum[g * blocks + b] = _mm512_reduce_add_ps(sum);
    }
  q4_lanes<G>(q, hd, gsize, t, dsc, msc, qsum, scale, s, lds, mask);
}

// acc[g][x] += p[g][j] y_j over columns [c0, c0 + 32) of one block: each row's codes
// decoded once (d * code + m, multiplied then added as the reference decoder does).
template <int G>
inline void pv_q4_slice(const float* p, int ldp, int hd, int gsize, const uint8_t* const* rows, int n, float* acc,
                        int c0) {
  const int half = gsize / 2, in_block = c0 % gsize;
  const int block_off = c0 / gsize * (half + 4), byte_off = block_off + 4 + in_block % half;
  const bool high = in_block >= half;
  const __m128i nib = _mm_set1_epi8(15);
  __m512 a[G][2];
  unroll<G>([&](auto g) {
    unroll<2>([&](auto x) { a[g][x] = _mm512_loadu_ps(acc + g * hd + c0 + 16 * x); });
  });
  for (int j = 0; j < n; ++j) {
    uint16_t h[2];
    std::memcpy(h, rows[j] + block_off, 4);
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(h[0])), m = _mm512_set1_ps(_cvtsh_ss(h[1]));
    __m512 v[2];
    for (int x = 0; x < 2; ++x) {
      // Columns c0 + 16 x ..: 16 bytes on from byte_off + 16 x (G = 64) or the low and
      // high nibbles of the same 16 bytes (G = 32).
      const int off = gsize == 32 ? byte_off : byte_off + 16 * x;
      const bool hi = gsize == 32 ? x == 1 : high;
      __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j] + off));
      if (hi) bytes = _mm_srli_epi16(bytes, 4);
      const __m512 c = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(bytes, nib)));
      v[x] = _mm512_add_ps(_mm512_mul_ps(d, c), m);
    }
    unroll<G>([&](auto g) {
      const __m512 w = _mm512_set1_ps(p[g * ldp + j]);
      unroll<2>([&](auto x) { a[g][x] = _mm512_fmadd_ps(w, v[x], a[g][x]); });
    });
  }
  unroll<G>([&](auto g) {
    unroll<2>([&](auto x) { _mm512_storeu_ps(acc + g * hd + c0 + 16 * x, a[g][x]); });
  });
}

}  // namespace

void scores_f16(const float* q, int group, int hd, const uint16_t* const* rows, int n, float scale, float* s,
                int lds) {
  if (hd <= 20 * group) {
    scores_by_keys(q, group, hd, rows, n, scale, s, lds);
  } else {
    scores_by_dims(q, group, hd, n, scale, s, lds, [&](int j, float* dst) {
      for (int d = 0; d < hd; d += 16) _mm512_store_ps(dst + d, f16x16(rows[j] + d));
    });
  }
}

void scores_q8(const float* q, int group, int hd, int gsize, const uint8_t* const* rows, int n, float scale,
               float* s, int lds) {
  if (hd <= 20 * group) {
    scores_q8_by_keys(q, group, hd, gsize, rows, n, scale, s, lds);
  } else {
    scores_by_dims(q, group, hd, n, scale, s, lds, [&](int j, float* dst) {
      const uint8_t* block = rows[j];
      for (int b = 0; b < hd / gsize; ++b, block += gsize + 2) {
        uint16_t h;
        std::memcpy(&h, block, 2);
        const __m512 dv = _mm512_set1_ps(_cvtsh_ss(h));
        for (int d = 0; d < gsize; d += 16) {
          const __m512 c = _mm512_cvtepi32_ps(
              _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + d))));
          _mm512_store_ps(dst + b * gsize + d, _mm512_mul_ps(dv, c));
        }
      }
    });
  }
}

void pv_f16(const float* p, int ldp, int group, int hd, const uint16_t* const* rows, int n, float* acc) {
  for (int j0 = 0; j0 < n; j0 += kPvRows) {
    const int jn = std::min(kPvRows, n - j0);
    int g = 0;
    for (; g + 8 <= group; g += 8) pv_heads<8>(p + g * ldp + j0, ldp, hd, rows + j0, jn, acc + g * hd);
    for (; g + 4 <= group; g += 4) pv_heads<4>(p + g * ldp + j0, ldp, hd, rows + j0, jn, acc + g * hd);
    for (; g + 2 <= group; g += 2) pv_heads<2>(p + g * ldp + j0, ldp, hd, rows + j0, jn, acc + g * hd);
    for (; g < group; ++g) pv_heads<1>(p + g * ldp + j0, ldp, hd, rows + j0, jn, acc + g * hd);
  }
}

void pv_q8(const float* p, int ldp, int group, int hd, int gsize, const uint8_t* const* rows, int n, float* acc) {
  for (int j0 = 0; j0 < n; j0 += kPvRows) {
    const int jn = std::min(kPvRows, n - j0);
    int g = 0;
    for (; g + 8 <= group; g += 8) pv_q8_heads<8>(p + g * ldp + j0, ldp, hd, gsize, rows + j0, jn, acc + g * hd);
    for (; g + 4 <= group; g += 4) pv_q8_heads<4>(p + g * ldp + j0, ldp, hd, gsize, rows + j0, jn, acc + g * hd);
    for (; g + 2 <= group; g += 2) pv_q8_heads<2>(p + g * ldp + j0, ldp, hd, gsize, rows + j0, jn, acc + g * hd);
    for (; g < group; ++g) pv_q8_heads<1>(p + g * ldp + j0, ldp, hd, gsize, rows + j0, jn, acc + g * hd);
  }
}

void scores_q4(const float* q, int group, int hd, int gsize, const uint8_t* const* rows, int n, float scale,
               float* s, int lds) {
  alignas(64) static const uint8_t zeros[kMaxHeadDim + 64] = {};
  alignas(64) uint8_t t[kMaxHeadDim * 16];
  alignas(64) float dsc[kMaxHeadDim / 32 * 16], msc[kMaxHeadDim / 32 * 16];
  const int half = gsize / 2, block_bytes = half + 4, blocks = hd / gsize;
  const __m512 scale_v = _mm512_set1_ps(scale);
  for (int j0 = 0; j0 < n; j0 += 16) {
    const int jn = std::min(16, n - j0);
    const uint8_t* r[16];
    for (int j = 0; j < 16; ++j) r[j] = j < jn ? rows[j0 + j] : zeros;
    for (int b = 0; b < blocks; ++b) {
      transpose_codes(r, b * block_bytes + 4, t + b * 512, half >= 32 ? 0xFFFFFFFFu : 0xFFFFu);
      alignas(32) uint16_t sd[16], sm[16];
      for (int j = 0; j < 16; ++j) {
        std::memcpy(&sd[j], r[j] + b * block_bytes, 2);
        std::memcpy(&sm[j], r[j] + b * block_bytes + 2, 2);
      }
      _mm512_store_ps(dsc + b * 16, _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sd))));
      _mm512_store_ps(msc + b * 16, _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sm))));
    }
    const __mmask16 mask = jn == 16 ? __mmask16(0xFFFF) : __mmask16((1u << jn) - 1);
    float* sj = s + j0;
    int g = 0;
    for (; g + 8 <= group; g += 8) q4_heads<8>(q + g * hd, hd, gsize, t, dsc, msc, scale_v, sj + g * lds, lds, mask);
    if (group - g >= 4) q4_heads<4>(q + g * hd, hd, gsize, t, dsc, msc, scale_v, sj + g * lds, lds, mask), g += 4;
    if (group - g >= 2) q4_heads<2>(q + g * hd, hd, gsize, t, dsc, msc, scale_v, sj + g * lds, lds, mask), g += 2;
    if (group - g >= 1) q4_heads<1>(q + g * hd, hd, gsize, t, dsc, msc, scale_v, sj + g * lds, lds, mask);
  }
}

void pv_q4(const float* p, int ldp, int group, int hd, int gsize, const uint8_t* const* rows, int n, float* acc) {
  for (int j0 = 0; j0 < n; j0 += kPvRows) {
    const int jn = std::min(kPvRows, n - j0);
    for (int c0 = 0; c0 < hd; c0 += 32) {
      int g = 0;
      for (; g + 8 <= group; g += 8) pv_q4_slice<8>(p + g * ldp + j0, ldp, hd, gsize, rows + j0, jn, acc + g * hd, c0);
      for (; g + 4 <= group; g += 4) pv_q4_slice<4>(p + g * ldp + j0, ldp, hd, gsize, rows + j0, jn, acc + g * hd, c0);
      for (; g + 2 <= group; g += 2) pv_q4_slice<2>(p + g * ldp + j0, ldp, hd, gsize, rows + j0, jn, acc + g * hd, c0);
      for (; g < group; ++g) pv_q4_slice<1>(p + g * ldp + j0, ldp, hd, gsize, rows + j0, jn, acc + g * hd, c0);
    }
  }
}

}  // namespace ember::cpu::avx512
