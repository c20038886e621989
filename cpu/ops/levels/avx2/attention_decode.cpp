// The AVX2 level's fused decode-attention kernels (attention_flash.cpp's lone-token
// path) over F16, INT8 and INT4 cache rows where they lie in the cache pages:
// OpKernels::scores_f16, pv_f16, scores_q8, pv_q8, scores_q4, pv_q4. head_dim must be a
// multiple of 16 (the caller checks).
//
// Scores, dims across the lanes, in one of two forms with the same sums (one 8-lane
// accumulator per query head and key, reduced to 8 scores by horizontal adds):
// - tiled (F16 always; INT8/INT4 for up to 4 query heads per kv head): 4 heads x 2 keys
//   (2 heads x 4 keys, 1 x 8 for smaller groups), each 8-value key vector converted once per tile
//   straight from its row into a register, the next tile's rows prefetched into L1. At
//   Gemma 3's shape this ran 1.4x the block form's speed from L2 on an AVX2 Zen 3
//   (docs/long-context.md).
// - block (INT8/INT4 for more than 4 heads): up to 32 keys (8 KiB of f32) are decoded
//   into an f32 block on the stack, all their loads issued together, and every head reads
//   them from there, so that each key is decoded once however many heads share it.
// (Keys across the lanes, the AVX-512 form for small heads, would cost a transpose of
// 24 shuffles per 8 keys x 8 dims; with 8 lanes that is no cheaper than the 8-way
// reduction it saves.)
// P.V, two forms with the same sums (per column, the rows added in order):
// - by rows (up to 4 query heads per kv head): 2 rows x 4 heads at a time (4 rows x 2
//   heads, 8 rows x 1 head for smaller groups), the probabilities in registers, the accumulators in L1; each row
//   decoded once and read from start to end, the next rows prefetched into L1. At Gemma
//   3's shape the op streamed its cache about 1.3x faster than with the slices
//   (docs/long-context.md), whose column-wise walk over 32 rows waited on memory.
// - slices (more than 4 heads): 16-column slices for up to 4 query heads (8
//   accumulators); each value chunk is decoded once per slice for those heads, the
//   probabilities come in as broadcasts.
// Decoding: F16 by F16C; INT8 d * code; INT4 d * code + m (multiplied, then added, as
// the reference decoder does), its nibbles widened by the load (nibbles8: 3 instructions
// per 8 codes instead of 5; the same values, 1.1-1.3x faster kernels from L1/L2 at Gemma
// 3's shape on an AVX2 Zen 3, docs/long-context.md).
//
// The accumulator arrays are indexed through unroll<> (cpu/kernels/unroll.hpp): with a
// plain loop GCC 12 stored all 8 accumulators to the stack on every row of P.V.
#include <algorithm>
#include <cstring>

#include "cpu/kernels/unroll.hpp"
#include "cpu/kernels/x86_intrinsics.hpp"
#include "cpu/ops/levels/avx2/codes.hpp"
#include "cpu/ops/levels/levels.hpp"

namespace ember::cpu::avx2 {
namespace {

constexpr int kMaxHeadDim = 512;
constexpr int kPvRows = 32;
// Floats of decoded keys per scoring step.
constexpr int kKeyFloats = 2048;

inline __m256 f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The codes of 8 INT4 values starting at value e of a block (e a multiple of 8) as
// floats: the low nibbles of bytes e.. when e < half, else the high nibbles of bytes
// e - half... Each byte is widened to 32 bits by the load (vpmovzxbd), so that a low
// nibble is one AND and a high nibble one shift: 3 instructions per 8 values.
inline __m256 nibbles8(const uint8_t* codes, int e, int half) {
  const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + (e < half ? e : e - half))));
  return _mm256_cvtepi32_ps(e < half ? _mm256_and_si256(x, _mm256_set1_epi32(15)) : _mm256_srli_epi32(x, 4));
}

// The codes of 16 INT4 values starting at value e of a block (e a multiple of 16): one
// 16-byte load, widened 8 bytes at a time.
inline void nibbles16(const uint8_t* codes, int e, int half, __m256& lo8, __m256& hi8) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + (e < half ? e : e - half)));
  __m256i a = _mm256_cvtepu8_epi32(x), b = _mm256_cvtepu8_epi32(_mm_srli_si128(x, 8));
  if (e < half) {
    a = _mm256_and_si256(a, _mm256_set1_epi32(15));
    b = _mm256_and_si256(b, _mm256_set1_epi32(15));
  } else {
    a = _mm256_srli_epi32(a, 4);
    b = _mm256_srli_epi32(b, 4);
  }
  lo8 = _mm256_cvtepi32_ps(a);
  hi8 = _mm256_cvtepi32_ps(b);
}

// Lane j = the sum of acc[j]'s 8 lanes.
inline __m256 reduce8(const __m256* acc) {
  const __m256 h01 = _mm256_hadd_ps(acc[0], acc[1]), h23 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 h45 = _mm256_hadd_ps(acc[4], acc[5]), h67 = _mm256_hadd_ps(acc[6], acc[7]);
  const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20), _mm256_permute2f128_ps(h0123, h4567, 0x31));
}

// ---- row decoders (whole rows into f32, for the scores) ----

struct F16Row {
  const uint16_t* const* rows;
  void operator()(int j, int hd, float* dst) const {
    for (int d = 0; d < hd; d += 8) _mm256_store_ps(dst + d, f16x8(rows[j] + d));
  }
};

struct Q8Row {
  const uint8_t* const* rows;
  int gsize;
  void operator()(int j, int hd, float* dst) const {
    const uint8_t* block = rows[j];
    for (int b = 0; b < hd / gsize; ++b, block += gsize + 2) {
      const __m256 dv = _mm256_set1_ps(half_f16c(block));
      for (int e = 0; e < gsize; e += 8) _mm256_store_ps(dst + b * gsize + e, _mm256_mul_ps(dv, i8x8(block + 2 + e)));
    }
  }
};

struct Q4Row {
  const uint8_t* const* rows;
  int gsize;
  void operator()(int j, int hd, float* dst) const {
    const int half = gsize / 2;
    const uint8_t* block = rows[j];
    for (int b = 0; b < hd / gsize; ++b, block += half + 4) {
      const __m256 dv = _mm256_set1_ps(half_f16c(block)), mv = _mm256_set1_ps(half_f16c(block + 2));
      for (int e = 0; e < gsize; e += 16) {
        __m256 lo, hi;
        nibbles16(block + 4, e, half, lo, hi);
        _mm256_store_ps(dst + b * gsize + e, _mm256_add_ps(_mm256_mul_ps(dv, lo), mv));
        _mm256_store_ps(dst + b * gsize + e + 8, _mm256_add_ps(_mm256_mul_ps(dv, hi), mv));
      }
    }
  }
};

template <class Decode>
void scores_by_dims(const float* q, int group, int hd, int n, float scale, float* s, int lds, const Decode& decode) {
  alignas(32) float keys[std::max(kKeyFloats, 8 * kMaxHeadDim)];
  const int step = std::clamp(kKeyFloats / hd / 8 * 8, 8, 32);
  const __m256 scale_v = _mm256_set1_ps(scale);
  for (int k0 = 0; k0 < n; k0 += step) {
    const int kn = std::min(step, n - k0);
    for (int j = 0; j < (kn + 7) / 8 * 8; ++j) {
      float* dst = keys + j * hd;
      if (j < kn) {
        decode(k0 + j, hd, dst);
      } else {
        for (int d = 0; d < hd; d += 8) _mm256_store_ps(dst + d, _mm256_setzero_ps());
      }
    }
    for (int j0 = k0; j0 < k0 + kn; j0 += 8) {
      const int jn = std::min(8, n - j0);
      const float* kb = keys + (j0 - k0) * hd;
      const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(jn), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      for (int g = 0; g < group; ++g) {
        const float* qg = q + g * hd;
        __m256 acc[8];
        unroll<8>([&](auto j) { acc[j] = _mm256_setzero_ps(); });
        for (int d = 0; d < hd; d += 8) {
          const __m256 qv = _mm256_loadu_ps(qg + d);
          unroll<8>([&](auto j) { acc[j] = _mm256_fmadd_ps(qv, _mm256_load_ps(kb + j * hd + d), acc[j]); });
        }
        // The 8 scores written in place (masked for a short last block).
        const __m256 r = _mm256_mul_ps(scale_v, reduce8(acc));
        if (jn == 8) _mm256_storeu_ps(s + g * lds + j0, r);
        else _mm256_maskstore_ps(s + g * lds + j0, tail, r);
      }
    }
  }
}

// ---- key decoders for the tiled scores (8 values of a row at a time) ----
// blocks(hd) blocks of block_dims(hd) values per row; block(row, b) gives what get()
// needs for block b (its codes and scales), get(block, e) values e .. e + 8 of it.

struct F16Keys {
  const uint16_t* const* rows;
  static int blocks(int) { return 1; }
  static int block_dims(int hd) { return hd; }
  int row_bytes(int hd) const { return 2 * hd; }
  const void* row(int j) const { return rows[j]; }
  const uint16_t* block(int j, int) const { return rows[j]; }
  static __m256 get(const uint16_t* p, int e) { return f16x8(p + e); }
};

struct Q8Keys {
  const uint8_t* const* rows;
  int gsize;
  struct Block {
    const uint8_t* codes;
    __m256 d;
  };
  int blocks(int hd) const { return hd / gsize; }
  int block_dims(int) const { return gsize; }
  int row_bytes(int hd) const { return hd / gsize * (gsize + 2); }
  const void* row(int j) const { return rows[j]; }
  Block block(int j, int b) const {
    const uint8_t* p = rows[j] + b * (gsize + 2);
    return {p + 2, _mm256_set1_ps(half_f16c(p))};
  }
  static __m256 get(const Block& k, int e) { return _mm256_mul_ps(k.d, i8x8(k.codes + e)); }
};

struct Q4Keys {
  const uint8_t* const* rows;
  int gsize;
  struct Block {
    const uint8_t* codes;
    __m256 d, m;
    int half;
  };
  int blocks(int hd) const { return hd / gsize; }
  int block_dims(int) const { return gsize; }
  int row_bytes(int hd) const { return hd / gsize * (gsize / 2 + 4); }
  const void* row(int j) const { return rows[j]; }
  Block block(int j, int b) const {
    const uint8_t* p = rows[j] + b * (gsize / 2 + 4);
    return {p + 4, _mm256_set1_ps(half_f16c(p)), _mm256_set1_ps(half_f16c(p + 2)), gsize / 2};
  }
  // Value e of a block is the low nibble of byte e when e < half, else the high nibble
  // of byte e - half; decoded as d * code + m (multiplied, then added, as the
  // reference decoder does).
  static __m256 get(const Block& k, int e) {
    return _mm256_add_ps(_mm256_mul_ps(k.d, nibbles8(k.codes, e, k.half)), k.m);
  }
};

// The 8-value vectors of rows j0 .. j0 + R in order: body(d, v) with v[r] = values
// d .. d + 8 of row j0 + r, d = 0, 8, .. hd - 8; each block's scales read once per row.
template <int R, class Rows, class Body>
inline void for_each_vector(const Rows& rows, int j0, int hd, const Body& body) {
  const int dims = rows.block_dims(hd);
  for (int b = 0; b < rows.blocks(hd); ++b) {
    decltype(rows.block(0, 0)) blk[R];
    unroll<R>([&](auto r) { blk[r] = rows.block(j0 + r, b); });
    for (int e = 0; e < dims; e += 8) {
      __m256 v[R];
      unroll<R>([&](auto r) { v[r] = Rows::get(blk[r], e); });
      body(b * dims + e, v);
    }
  }
}

// Every line of rows [j0, min(n, j0 + count)) into L1.
template <class Rows>
inline void prefetch_rows(const Rows& rows, int hd, int j0, int count, int n) {
  const int bytes = rows.row_bytes(hd);
  for (int j = j0; j < std::min(n, j0 + count); ++j)
    for (int off = 0; off < bytes; off += 64) _mm_prefetch(static_cast<const char*>(rows.row(j)) + off, _MM_HINT_T0);
}

// Scores without a decoded block: a tile of G query heads x KJ keys (G * KJ <= 8
// accumulators, one per score); each 8-value key vector is decoded once per tile straight
// from its row and used by the G heads, the query vectors are loaded once per 8 dims.
// Every score is summed per lane over the dims and then by reduce8's tree, the order of
// scores_by_dims, so both forms give the same bits.
template <int G, int KJ, class Keys>
inline void scores_tile(const float* q, int hd, const Keys& keys, int j0, __m256 scale_v, float* s, int lds) {
  static_assert(G * KJ <= 8);
  __m256 acc[8];
  unroll<8>([&](auto i) { acc[i] = _mm256_setzero_ps(); });
  for_each_vector<KJ>(keys, j0, hd, [&](int d, const __m256* k) {
    unroll<G>([&](auto g) {
      __m256 qv = _mm256_loadu_ps(q + g * hd + d);
      // One load per query vector and 8 dims: without this empty asm GCC folds the
      // load into each of the KJ FMAs, and the loop is then bound by its loads.
      asm("" : "+x"(qv));
      unroll<KJ>([&](auto j) { acc[g * KJ + j] = _mm256_fmadd_ps(qv, k[j], acc[g * KJ + j]); });
    });
  });
  const __m256 r = _mm256_mul_ps(scale_v, reduce8(acc));
  if constexpr (G == 4 && KJ == 2) {
    const __m128 lo = _mm256_castps256_ps128(r), hi = _mm256_extractf128_ps(r, 1);
    _mm_storel_pi(reinterpret_cast<__m64*>(s), lo);
    _mm_storeh_pi(reinterpret_cast<__m64*>(s + lds), lo);
    _mm_storel_pi(reinterpret_cast<__m64*>(s + 2 * lds), hi);
    _mm_storeh_pi(reinterpret_cast<__m64*>(s + 3 * lds), hi);
  } else {
    alignas(32) float t[8];
    _mm256_store_ps(t, r);
    for (int g = 0; g < G; ++g)
      for (int j = 0; j < KJ; ++j) s[g * lds + j] = t[g * KJ + j];
  }
}

template <int G, int KJ, class Keys>
void scores_heads(const float* q, int hd, const Keys& keys, int n, __m256 scale_v, float* s, int lds) {
  int j = 0;
  for (; j + KJ <= n; j += KJ) {
    prefetch_rows(keys, hd, j + KJ, KJ, n);  // the next tile's rows, while this one computes
    scores_tile<G, KJ>(q, hd, keys, j, scale_v, s + j, lds);
  }
  for (; j < n; ++j) scores_tile<G, 1>(q, hd, keys, j, scale_v, s + j, lds);
}

template <class Keys>
void scores_tiled(const float* q, int group, int hd, const Keys& keys, int n, float scale, float* s, int lds) {
  const __m256 scale_v = _mm256_set1_ps(scale);
  int g = 0;
  for (; g + 4 <= group; g += 4) scores_heads<4, 2>(q + g * hd, hd, keys, n, scale_v, s + g * lds, lds);
  for (; g + 2 <= group; g += 2) scores_heads<2, 4>(q + g * hd, hd, keys, n, scale_v, s + g * lds, lds);
  for (; g < group; ++g) scores_heads<1, 8>(q + g * hd, hd, keys, n, scale_v, s + g * lds, lds);
}

// ---- slice decoders (16 columns [c0, c0 + 16) of a row, for P.V) ----

struct F16Slice {
  const uint16_t* const* rows;
  int c0;
  void operator()(int j, __m256* v) const {
    v[0] = f16x8(rows[j] + c0);
    v[1] = f16x8(rows[j] + c0 + 8);
  }
};

struct Q8Slice {
  const uint8_t* const* rows;
  int block_off, code_off;  // of the slice's block and of its first code
  Q8Slice(const uint8_t* const* r, int gsize, int c0)
      : rows(r), block_off(c0 / gsize * (gsize + 2)), code_off(block_off + 2 + c0 % gsize) {}
  void operator()(int j, __m256* v) const {
    const __m256 dv = _mm256_set1_ps(half_f16c(rows[j] + block_off));
    v[0] = _mm256_mul_ps(dv, i8x8(rows[j] + code_off));
    v[1] = _mm256_mul_ps(dv, i8x8(rows[j] + code_off + 8));
  }
};

struct Q4Slice {
  const uint8_t* const* rows;
  int half, block_off, e;
  Q4Slice(const uint8_t* const* r, int gsize, int c0)
      : rows(r), half(gsize / 2), block_off(c0 / gsize * (gsize / 2 + 4)), e(c0 % gsize) {}
  void operator()(int j, __m256* v) const {
    const uint8_t* block = rows[j] + block_off;
    const __m256 dv = _mm256_set1_ps(half_f16c(block)), mv = _mm256_set1_ps(half_f16c(block + 2));
    v[0] = nibbles8(block + 4, e, half);
    v[1] = nibbles8(block + 4, e + 8, half);
    v[0] = _mm256_add_ps(_mm256_mul_ps(dv, v[0]), mv);
    v[1] = _mm256_add_ps(_mm256_mul_ps(dv, v[1]), mv);
  }
};

// acc[g][c0 .. c0 + 16) += p[g][j] v_j[c0 .. c0 + 16) over the block's rows, G heads.
template <int G, class Slice>
inline void pv_slice(const float* p, int ldp, int hd, int n, float* acc, int c0, const Slice& slice) {
  __m256 a[G][2];
  unroll<G>([&](auto g) {
    unroll<2>([&](auto x) { a[g][x] = _mm256_loadu_ps(acc + g * hd + c0 + 8 * x); });
  });
  for (int j = 0; j < n; ++j) {
    __m256 v[2];
    slice(j, v);
    unroll<G>([&](auto g) {
      const __m256 w = _mm256_broadcast_ss(p + g * ldp + j);
      unroll<2>([&](auto x) { a[g][x] = _mm256_fmadd_ps(w, v[x], a[g][x]); });
    });
  }
  unroll<G>([&](auto g) {
    unroll<2>([&](auto x) { _mm256_storeu_ps(acc + g * hd + c0 + 8 * x, a[g][x]); });
  });
}

// P.V by rows (up to 4 query heads per kv head): acc[g][0 .. hd) += p[g][j] v_j for R
// rows at a time and G heads, the G x R probabilities in registers, the accumulators
// read and written in L1 once per R rows; each row is decoded once (Rows: the decoders
// of the tiled scores) and read from start to end, the next R rows prefetched into L1.
// Per column the rows are added in order, as pv_slice adds them: the same bits.
template <int G, int R, class Rows>
inline void pv_rowtile(const float* p, int ldp, int hd, const Rows& rows, int j0, float* acc) {
  static_assert(G * R <= 8);
  __m256 w[G][R];
  unroll<G>([&](auto g) { unroll<R>([&](auto r) { w[g][r] = _mm256_broadcast_ss(p + g * ldp + r); }); });
  for_each_vector<R>(rows, j0, hd, [&](int d, const __m256* v) {
    unroll<G>([&](auto g) {
      __m256 a = _mm256_loadu_ps(acc + g * hd + d);
      unroll<R>([&](auto r) { a = _mm256_fmadd_ps(w[g][r], v[r], a); });
      _mm256_storeu_ps(acc + g * hd + d, a);
    });
  });
}

template <int G, int R, class Rows>
void pv_rows_seq(const float* p, int ldp, int hd, const Rows& rows, int n, float* acc) {
  int j = 0;
  for (; j + R <= n; j += R) {
    prefetch_rows(rows, hd, j + R, R, n);
    pv_rowtile<G, R>(p + j, ldp, hd, rows, j, acc);
  }
  for (; j < n; ++j) pv_rowtile<G, 1>(p + j, ldp, hd, rows, j, acc);
}

template <class Rows>
void pv_by_rows(const float* p, int ldp, int group, int hd, const Rows& rows, int n, float* acc) {
  int g = 0;
  for (; g + 4 <= group; g += 4) pv_rows_seq<4, 2>(p + g * ldp, ldp, hd, rows, n, acc + g * hd);
  for (; g + 2 <= group; g += 2) pv_rows_seq<2, 4>(p + g * ldp, ldp, hd, rows, n, acc + g * hd);
  for (; g < group; ++g) pv_rows_seq<1, 8>(p + g * ldp, ldp, hd, rows, n, acc + g * hd);
}

// make_slice(c0) gives the decoder of columns [c0, c0 + 16).
template <class MakeSlice>
void pv_rows(const float* p, int ldp, int group, int hd, int n, float* acc, const MakeSlice& make_slice) {
  for (int j0 = 0; j0 < n; j0 += kPvRows) {
    const int jn = std::min(kPvRows, n - j0);
    for (int c0 = 0; c0 < hd; c0 += 16) {
      const auto slice = make_slice(j0, c0);
      int g = 0;
      for (; g + 4 <= group; g += 4) pv_slice<4>(p + g * ldp + j0, ldp, hd, jn, acc + g * hd, c0, slice);
      for (; g + 2 <= group; g += 2) pv_slice<2>(p + g * ldp + j0, ldp, hd, jn, acc + g * hd, c0, slice);
      for (; g < group; ++g) pv_slice<1>(p + g * ldp + j0, ldp, hd, jn, acc + g * hd, c0, slice);
    }
  }
}

}  // namespace

void scores_f16(const float* q, int group, int hd, const uint16_t* const* rows, int n, float scale, float* s,
                int lds) {
  scores_tiled(q, group, hd, F16Keys{rows}, n, scale, s, lds);
}

void pv_f16(const float* p, int ldp, int group, int hd, const uint16_t* const* rows, int n, float* acc) {
  if (group <= 4) pv_by_rows(p, ldp, group, hd, F16Keys{rows}, n, acc);
  else pv_rows(p, ldp, group, hd, n, acc, [&](int j0, int c0) { return F16Slice{rows + j0, c0}; });
}

void scores_q8(const float* q, int group, int hd, int gsize, const uint8_t* const* rows, int n, float scale,
               float* s, int lds) {
  if (group > 4) scores_by_dims(q, group, hd, n, scale, s, lds, Q8Row{rows, gsize});
  else scores_tiled(q, group, hd, Q8Keys{rows, gsize}, n, scale, s, lds);
}

void pv_q8(const float* p, int ldp, int group, int hd, int gsize, const uint8_t* const* rows, int n, float* acc) {
  if (group <= 4) pv_by_rows(p, ldp, group, hd, Q8Keys{rows, gsize}, n, acc);
  else pv_rows(p, ldp, group, hd, n, acc, [&](int j0, int c0) { return Q8Slice(rows + j0, gsize, c0); });
}

void scores_q4(const float* q, int group, int hd, int gsize, const uint8_t* const* rows, int n, float scale,
               float* s, int lds) {
  if (group > 4) scores_by_dims(q, group, hd, n, scale, s, lds, Q4Row{rows, gsize});
  else scores_tiled(q, group, hd, Q4Keys{rows, gsize}, n, scale, s, lds);
}

void pv_q4(const float* p, int ldp, int group, int hd, int gsize, const uint8_t* const* rows, int n, float* acc) {
  if (group <= 4) pv_by_rows(p, ldp, group, hd, Q4Keys{rows, gsize}, n, acc);
  else pv_rows(p, ldp, group, hd, n, acc, [&](int j0, int c0) { return Q4Slice(rows + j0, gsize, c0); });
}

}  // namespace ember::cpu::avx2
