// Attention over the paged KV cache on the CPU. Quantized caches and long sequences
// (more than kFlashMinCells cells) take the flash schedules of attention_flash.cpp;
// the rest (F16 and F32 caches) takes one of two schedules here, both adding
// their products in llama.cpp's order (see "llama.cpp's summation orders" below):
// queries and probabilities are rounded to F16 for an F16 cache, the softmax uses
// exp_fma and llama.cpp's partial sums.
//
// Few query tokens of a sequence (decode): work items are (query token, kv head)
// pairs spread over the pool. For each, the visible cache slots are listed once;
// then every query head of the group scores each key row while it is in L1, a
// max-subtracted softmax follows, and the value rows are accumulated in the same
// slot order. K/V rows are F16 or F32; the inner products use F16C + FMA (AVX2)
// or AVX-512 when the backend's level allows, NEON at every ARM64 level.
//
// Many query tokens of a sequence (prefill): the sequence's keys and values of
// each kv head are converted to f32 matrices once (values transposed), and blocks
// of query rows (tokens x heads of the group) become two GEMMs in lanes16 order,
// scores = Q K^T and out = P V, with the causal / sliding-window mask and the
// softmax in between.
#include <algorithm>
#include <utility>
#include <cmath>
#include <limits>
#include <vector>

#include "common/fail.hpp"
#include "common/fp16.hpp"
#include "cpu/ops/attention_flash.hpp"
#include "cpu/ops/attention_scores.hpp"
#include "cpu/ops/ops.hpp"
#include "cpu/ops/vec_math.hpp"

#if defined(EMBER_X86)
#include <immintrin.h>
#elif defined(EMBER_ARM64)
#include <arm_neon.h>
#endif

namespace ember::cpu {
namespace {

// ---- row kernels: dot(q, k) and acc += w * v, for F16 and F32 cache rows ----

float dot_f16_scalar(const float* q, const uint16_t* k, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += q[i] * fp16_to_fp32(k[i]);
  return s;
}
void axpy_f16_scalar(float* acc, float w, const uint16_t* v, int n) {
  for (int i = 0; i < n; ++i) acc[i] = std::fma(w, fp16_to_fp32(v[i]), acc[i]);
}
float dot_f32_scalar(const float* q, const float* k, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += q[i] * k[i];
  return s;
}
void axpy_f32_scalar(float* acc, float w, const float* v, int n) {
  for (int i = 0; i < n; ++i) acc[i] = std::fma(w, v[i], acc[i]);
}

#if defined(EMBER_X86)
__attribute__((target("avx2,fma,f16c"))) inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
__attribute__((target("avx2,fma,f16c"))) float dot_f16_avx2(const float* q, const uint16_t* k, int n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i),
                         _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + i))), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8),
                         _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + i + 8))), a1);
  }
  float s = hsum256(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += q[i] * fp16_to_fp32(k[i]);
  return s;
}
__attribute__((target("avx2,fma,f16c"))) void axpy_f16_avx2(float* acc, float w, const uint16_t* v, int n) {
  const __m256 wv = _mm256_set1_ps(w);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i)));
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(wv, x, _mm256_loadu_ps(acc + i)));
  }
  for (; i < n; ++i) acc[i] += w * fp16_to_fp32(v[i]);
}
__attribute__((target("avx2,fma"))) float dot_f32_avx2(const float* q, const float* k, int n) {
  __m256 a0 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), a0);
  float s = hsum256(a0);
  for (; i < n; ++i) s += q[i] * k[i];
  return s;
}
__attribute__((target("avx2,fma"))) void axpy_f32_avx2(float* acc, float w, const float* v, int n) {
  const __m256 wv = _mm256_set1_ps(w);
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(acc + i)));
  for (; i < n; ++i) acc[i] += w * v[i];
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma"))) float dot_f16_avx512(const float* q,
                                                                                          const uint16_t* k,
                                                                                          int n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i),
                         _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + i))), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16),
                         _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + i + 16))), a1);
  }
  float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  for (; i < n; ++i) s += q[i] * fp16_to_fp32(k[i]);
  return s;
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma"))) void axpy_f16_avx512(float* acc, float w,
                                                                                           const uint16_t* v,
                                                                                           int n) {
  const __m512 wv = _mm512_set1_ps(w);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)));
    _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(wv, x, _mm512_loadu_ps(acc + i)));
  }
  for (; i < n; ++i) acc[i] += w * fp16_to_fp32(v[i]);
}
#endif

#if defined(EMBER_ARM64)
// NEON is part of the ARMv8-A baseline the generic code is compiled for: no target
// attribute. axpy is one fma per element, as the scalar kernel, so the same bits.
float dot_f16_neon(const float* q, const uint16_t* k, int n) {
  float32x4_t a0 = vdupq_n_f32(0.0f), a1 = vdupq_n_f32(0.0f);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    a0 = vfmaq_f32(a0, vld1q_f32(q + i), vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(k + i))));
    a1 = vfmaq_f32(a1, vld1q_f32(q + i + 4), vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(k + i + 4))));
  }
  float s = vaddvq_f32(vaddq_f32(a0, a1));
  for (; i < n; ++i) s += q[i] * fp16_to_fp32(k[i]);
  return s;
}
void axpy_f16_neon(float* acc, float w, const uint16_t* v, int n) {
  int i = 0;
  for (; i + 4 <= n; i += 4)
    vst1q_f32(acc + i, vfmaq_n_f32(vld1q_f32(acc + i), vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(v + i))), w));
  for (; i < n; ++i) acc[i] = std::fma(w, fp16_to_fp32(v[i]), acc[i]);
}
float dot_f32_neon(const float* q, const float* k, int n) {
  float32x4_t a0 = vdupq_n_f32(0.0f), a1 = vdupq_n_f32(0.0f);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    a0 = vfmaq_f32(a0, vld1q_f32(q + i), vld1q_f32(k + i));
    a1 = vfmaq_f32(a1, vld1q_f32(q + i + 4), vld1q_f32(k + i + 4));
  }
  float s = vaddvq_f32(vaddq_f32(a0, a1));
  for (; i < n; ++i) s += q[i] * k[i];
  return s;
}
void axpy_f32_neon(float* acc, float w, const float* v, int n) {
  int i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(acc + i, vfmaq_n_f32(vld1q_f32(acc + i), vld1q_f32(v + i), w));
  for (; i < n; ++i) acc[i] = std::fma(w, v[i], acc[i]);
}
#endif

struct RowKernels {
  float (*dot_f16)(const float*, const uint16_t*, int);
  void (*axpy_f16)(float*, float, const uint16_t*, int);
  float (*dot_f32)(const float*, const float*, int);
  void (*axpy_f32)(float*, float, const float*, int);
};

RowKernels row_kernels(Isa isa) {
#if defined(EMBER_X86)
  if (isa == Isa::avx512) return {dot_f16_avx512, axpy_f16_avx512, dot_f32_avx2, axpy_f32_avx2};
  if (op_level(isa) == Isa::avx2) return {dot_f16_avx2, axpy_f16_avx2, dot_f32_avx2, axpy_f32_avx2};
#elif defined(EMBER_ARM64)
  if (isa != Isa::scalar) return {dot_f16_neon, axpy_f16_neon, dot_f32_neon, axpy_f32_neon};
#endif
  return {dot_f16_scalar, axpy_f16_scalar, dot_f32_scalar, axpy_f32_scalar};
}

// Sequences with more cells than this take the flash schedules (attention_flash.cpp):
// up to here F16 results are llama.cpp's bit for bit (docs/model.md), past it the
// tiled and split-K kernels read the cache at memory speed.
constexpr int32_t kFlashMinCells = 1024;
// Sequences with at least this many query tokens in the batch use the GEMM schedule.
constexpr int64_t kBlockedMinTokens = 8;
// Query tokens per GEMM task.
constexpr int64_t kQueryBlock = 32;

// Host views of the index tensors, read once per op.

float to_f32(const Tensor& cache, int64_t slot, int64_t col) {
  return cache.type == backend::DType::f16 ? fp16_to_fp32(cache.row_ptr<uint16_t>(slot)[col])
                                           : cache.row_ptr<float>(slot)[col];
}

inline float to_float(float x) { return x; }
inline float to_float(uint16_t h) { return fp16_to_fp32(h); }

// ---- llama.cpp's summation orders ----
//
// ember's F16-cache attention adds its products in exactly the order llama.cpp's
// CPU backend does (flash attention off, ggml_mul_mat on F16 operands), so that
// the two agree bit for bit (docs/model.md, "Numerics"). Two orders occur:
//  - "lanes16" (llama.cpp multiplies with its tinyBLAS GEMM: a batch of >= 2
//    tokens): element i of a dot product goes to lane i % 16, each lane is a
//    sequential FMA chain, and the 16 lanes are added as a tree: (l, l+8), then
//    (l, l+4), (l, l+2), (l, l+1) — _mm512_reduce_add_ps.
//  - "lanes64" (ggml_vec_dot_f16: a batch of one token): the first n & ~63
//    elements go to lane i % 64 (4 vectors of 16), the vectors are added
//    (v0+v2) + (v1+v3) and then as lanes16; the remaining elements are added one
//    by one in double after that.
// A Lanes16 is one 16-lane FMA accumulator, implemented per ISA level with the
// same results on each.

struct Lanes16Scalar {
  float v[16];
  static Lanes16Scalar zero() { return {}; }
  static Lanes16Scalar load(const float* p) {
    Lanes16Scalar r;
    for (int l = 0; l < 16; ++l) r.v[l] = p[l];
    return r;
  }
  static Lanes16Scalar load(const uint16_t* p) {
    Lanes16Scalar r;
    for (int l = 0; l < 16; ++l) r.v[l] = fp16_to_fp32(p[l]);
    return r;
  }
  static Lanes16Scalar fma(Lanes16Scalar a, Lanes16Scalar b, Lanes16Scalar c) {
    for (int l = 0; l < 16; ++l) c.v[l] = std::fma(a.v[l], b.v[l], c.v[l]);
    return c;
  }
  static Lanes16Scalar add(Lanes16Scalar a, Lanes16Scalar b) {
    for (int l = 0; l < 16; ++l) a.v[l] += b.v[l];
    return a;
  }
  float sum() const {
    float t[8];
    for (int l = 0; l < 8; ++l) t[l] = v[l] + v[l + 8];
    for (int l = 0; l < 4; ++l) t[l] += t[l + 4];
    for (int l = 0; l < 2; ++l) t[l] += t[l + 2];
    return t[0] + t[1];
  }
};

#if defined(EMBER_X86)
#define EMBER_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define EMBER_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")))

// Lanes 0-7 in lo, 8-15 in hi.
struct Lanes16Avx2 {
  __m256 lo, hi;
  EMBER_AVX2_TARGET static Lanes16Avx2 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  EMBER_AVX2_TARGET static Lanes16Avx2 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  EMBER_AVX2_TARGET static Lanes16Avx2 load(const uint16_t* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  EMBER_AVX2_TARGET static Lanes16Avx2 fma(Lanes16Avx2 a, Lanes16Avx2 b, Lanes16Avx2 c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  EMBER_AVX2_TARGET static Lanes16Avx2 add(Lanes16Avx2 a, Lanes16Avx2 b) {
    return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)};
  }
  EMBER_AVX2_TARGET float sum() const {
    const __m256 t8 = _mm256_add_ps(lo, hi);
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
    t = _mm_add_ps(t, _mm_movehl_ps(t, t));
    t = _mm_add_ss(t, _mm_movehdup_ps(t));
    return _mm_cvtss_f32(t);
  }
};

struct Lanes16Avx512 {
  __m512 v;
  EMBER_AVX512_TARGET static Lanes16Avx512 zero() { return {_mm512_setzero_ps()}; }
  EMBER_AVX512_TARGET static Lanes16Avx512 load(const float* p) { return {_mm512_loadu_ps(p)}; }
  EMBER_AVX512_TARGET static Lanes16Avx512 load(const uint16_t* p) {
    return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
  }
  EMBER_AVX512_TARGET static Lanes16Avx512 fma(Lanes16Avx512 a, Lanes16Avx512 b, Lanes16Avx512 c) {
    return {_mm512_fmadd_ps(a.v, b.v, c.v)};
  }
  EMBER_AVX512_TARGET static Lanes16Avx512 add(Lanes16Avx512 a, Lanes16Avx512 b) {
    return {_mm512_add_ps(a.v, b.v)};
  }
  EMBER_AVX512_TARGET float sum() const { return _mm512_reduce_add_ps(v); }
};
#elif defined(EMBER_ARM64)
// Lanes 4i .. 4i + 3 in v[i]; sum() adds as Lanes16Scalar::sum: (l, l + 8), (l, l + 4),
// (l, l + 2), (l, l + 1).
struct Lanes16Neon {
  float32x4_t v[4];
  static Lanes16Neon zero() { return {{vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}}; }
  static Lanes16Neon load(const float* p) { return {{vld1q_f32(p), vld1q_f32(p + 4), vld1q_f32(p + 8), vld1q_f32(p + 12)}}; }
  static Lanes16Neon load(const uint16_t* p) {
    Lanes16Neon r;
    for (int i = 0; i < 4; ++i) r.v[i] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p + 4 * i)));
    return r;
  }
  static Lanes16Neon fma(Lanes16Neon a, Lanes16Neon b, Lanes16Neon c) {
    for (int i = 0; i < 4; ++i) c.v[i] = vfmaq_f32(c.v[i], a.v[i], b.v[i]);
    return c;
  }
  static Lanes16Neon add(Lanes16Neon a, Lanes16Neon b) {
    for (int i = 0; i < 4; ++i) a.v[i] = vaddq_f32(a.v[i], b.v[i]);
    return a;
  }
  float sum() const {
    const float32x4_t t = vaddq_f32(vaddq_f32(v[0], v[2]), vaddq_f32(v[1], v[3]));
    const float32x2_t u = vadd_f32(vget_low_f32(t), vget_high_f32(t));
    return vget_lane_f32(u, 0) + vget_lane_f32(u, 1);
  }
};
#endif

// The lanes64 dot product of q (f32) and k (F16 or f32 row), n elements.
template <class L, class K>
float dot_lanes64(const float* q, const K* k, int n) {
  const int np = n & ~63;
  L acc[4] = {L::zero(), L::zero(), L::zero(), L::zero()};
  for (int i = 0; i < np; i += 64)
    for (int a = 0; a < 4; ++a) acc[a] = L::fma(L::load(k + i + 16 * a), L::load(q + i + 16 * a), acc[a]);
  double total = L::add(L::add(acc[0], acc[2]), L::add(acc[1], acc[3])).sum();
  for (int i = np; i < n; ++i) total += double(q[i] * to_float(k[i]));
  return float(total);
}

// The lanes16 dot product; n is a multiple of 16.
template <class L, class K>
float dot_lanes16(const float* q, const K* k, int n) {
  L acc = L::zero();
  for (int i = 0; i < n; i += 16) acc = L::fma(L::load(k + i), L::load(q + i), acc);
  return acc.sum();
}

// C[i][j] = lanes16 dot of A row i and B row j (k a multiple of 16), for an RM x RN tile.
template <class L, int RM, int RN>
void tile_lanes16(const float* a, int lda, const float* b, int ldb, float* c, int ldc, int k) {
  L acc[RM][RN];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) acc[i][j] = L::zero();
  for (int l = 0; l < k; l += 16) {
    L bv[RN];
    for (int j = 0; j < RN; ++j) bv[j] = L::load(b + size_t(j) * ldb + l);
    for (int i = 0; i < RM; ++i) {
      const L av = L::load(a + size_t(i) * lda + l);
      for (int j = 0; j < RN; ++j) acc[i][j] = L::fma(bv[j], av, acc[i][j]);
    }
  }
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RN; ++j) c[size_t(i) * ldc + j] = acc[i][j].sum();
}

// C[m][n] = lanes16 dot products of the rows of A [m][k] and B [n][k]: what
// llama.cpp's tinyBLAS computes for each element, tiled for registers.
template <class L, int RM, int RN>
void gemm_lanes16(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  int i = 0;
  for (; i + RM <= m; i += RM) {
    int j = 0;
    for (; j + RN <= n; j += RN)
      tile_lanes16<L, RM, RN>(a + size_t(i) * lda, lda, b + size_t(j) * ldb, ldb, c + size_t(i) * ldc + j, ldc, k);
    for (; j < n; ++j)
      tile_lanes16<L, RM, 1>(a + size_t(i) * lda, lda, b + size_t(j) * ldb, ldb, c + size_t(i) * ldc + j, ldc, k);
  }
  for (; i < m; ++i)
    for (int j = 0; j < n; ++j)
      tile_lanes16<L, 1, 1>(a + size_t(i) * lda, lda, b + size_t(j) * ldb, ldb, c + size_t(i) * ldc + j, ldc, k);
}

// out[d] = the lanes16 sum (lanes64: first reduced to 16 lanes as (v0+v2)+(v1+v3))
// of the partial sums part[lane][d], [lanes][n] row-major; part is overwritten.
EMBER_VECTORIZE void reduce_lanes(float* part, int lanes, int n, float* out) {
  auto p = [&](int lane) { return part + size_t(lane) * size_t(n); };
  if (lanes == 64)
    for (int l = 0; l < 16; ++l)
      for (int d = 0; d < n; ++d) p(l)[d] = (p(l)[d] + p(32 + l)[d]) + (p(16 + l)[d] + p(48 + l)[d]);
  for (int step = 8; step >= 2; step /= 2)
    for (int l = 0; l < step; ++l)
      for (int d = 0; d < n; ++d) p(l)[d] += p(l + step)[d];
  for (int d = 0; d < n; ++d) out[d] = p(0)[d] + p(1)[d];
}

// e^(s - max) over a row of scores and its sum as llama.cpp's softmax forms it:
// exp_fma, chunks of 16 consecutive key positions (positions not in the row
// count as 0) summed as lanes16, the chunk sums added in double.
// s[j] belongs to key position index[j] (increasing).
EMBER_VECTORIZE void exp_row(float* s, int64_t n, float max_score) {
  for (int64_t j = 0; j < n; ++j) s[j] = exp_fma(s[j] - max_score);
}
double softmax_total(const float* e, const int64_t* index, int64_t n) {
  double total = 0.0;
  Lanes16Scalar chunk = Lanes16Scalar::zero();
  int64_t chunk_id = -1;
  for (int64_t j = 0; j < n; ++j) {
    if (index[j] / 16 != chunk_id) {
      if (chunk_id >= 0) total += double(chunk.sum());
      chunk = Lanes16Scalar::zero();
      chunk_id = index[j] / 16;
    }
    chunk.v[index[j] % 16] = e[j];
  }
  if (chunk_id >= 0) total += double(chunk.sum());
  return total;
}

float round_f16(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }

// The kernels of one ISA level.
struct OrderedKernels {
  float (*dot64_f16)(const float*, const uint16_t*, int);
  float (*dot64_f32)(const float*, const float*, int);
  float (*dot16_f16)(const float*, const uint16_t*, int);
  float (*dot16_f32)(const float*, const float*, int);
  void (*gemm16)(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc);
};

float dot64_f16_scalar(const float* q, const uint16_t* k, int n) { return dot_lanes64<Lanes16Scalar>(q, k, n); }
float dot64_f32_scalar(const float* q, const float* k, int n) { return dot_lanes64<Lanes16Scalar>(q, k, n); }
float dot16_f16_scalar(const float* q, const uint16_t* k, int n) { return dot_lanes16<Lanes16Scalar>(q, k, n); }
float dot16_f32_scalar(const float* q, const float* k, int n) { return dot_lanes16<Lanes16Scalar>(q, k, n); }
void gemm16_scalar(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  gemm_lanes16<Lanes16Scalar, 1, 1>(m, n, k, a, lda, b, ldb, c, ldc);
}

#if defined(EMBER_X86)
// flatten: the templates and the Lanes16 members are inlined here, under this target.
#define EMBER_ORDERED_KERNELS(L, TARGET, suffix, RM, RN)                                                        \
  TARGET __attribute__((flatten)) float dot64_f16_##suffix(const float* q, const uint16_t* k, int n) {          \
    return dot_lanes64<L>(q, k, n);                                                                              \
  }                                                                                                              \
  TARGET __attribute__((flatten)) float dot64_f32_##suffix(const float* q, const float* k, int n) {             \
    return dot_lanes64<L>(q, k, n);                                                                              \
  }                                                                                                              \
  TARGET __attribute__((flatten)) float dot16_f16_##suffix(const float* q, const uint16_t* k, int n) {          \
    return dot_lanes16<L>(q, k, n);                                                                              \
  }                                                                                                              \
  TARGET __attribute__((flatten)) float dot16_f32_##suffix(const float* q, const float* k, int n) {             \
    return dot_lanes16<L>(q, k, n);                                                                              \
  }                                                                                                              \
  TARGET __attribute__((flatten)) void gemm16_##suffix(int m, int n, int k, const float* a, int lda,            \
                                                        const float* b, int ldb, float* c, int ldc) {            \
    gemm_lanes16<L, RM, RN>(m, n, k, a, lda, b, ldb, c, ldc);                                                    \
  }
EMBER_ORDERED_KERNELS(Lanes16Avx2, EMBER_AVX2_TARGET, avx2, 2, 3)
EMBER_ORDERED_KERNELS(Lanes16Avx512, EMBER_AVX512_TARGET, avx512, 4, 4)
#undef EMBER_ORDERED_KERNELS
#elif defined(EMBER_ARM64)
float dot64_f16_neon(const float* q, const uint16_t* k, int n) { return dot_lanes64<Lanes16Neon>(q, k, n); }
float dot64_f32_neon(const float* q, const float* k, int n) { return dot_lanes64<Lanes16Neon>(q, k, n); }
float dot16_f16_neon(const float* q, const uint16_t* k, int n) { return dot_lanes16<Lanes16Neon>(q, k, n); }
float dot16_f32_neon(const float* q, const float* k, int n) { return dot_lanes16<Lanes16Neon>(q, k, n); }
// 2 x 2 tiles: 16 accumulator registers of NEON's 32 (speed not measured on ARM).
void gemm16_neon(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
  gemm_lanes16<Lanes16Neon, 2, 2>(m, n, k, a, lda, b, ldb, c, ldc);
}
#endif

OrderedKernels ordered_kernels(Isa isa) {
#if defined(EMBER_X86)
  if (isa == Isa::avx512)
    return {dot64_f16_avx512, dot64_f32_avx512, dot16_f16_avx512, dot16_f32_avx512, gemm16_avx512};
  if (op_level(isa) == Isa::avx2) return {dot64_f16_avx2, dot64_f32_avx2, dot16_f16_avx2, dot16_f32_avx2, gemm16_avx2};
#elif defined(EMBER_ARM64)
  if (isa != Isa::scalar) return {dot64_f16_neon, dot64_f32_neon, dot16_f16_neon, dot16_f32_neon, gemm16_neon};
#endif
  return {dot64_f16_scalar, dot64_f32_scalar, dot16_f16_scalar, dot16_f32_scalar, gemm16_scalar};
}

// The per-token schedule for the tokens in `tokens`. lanes16: the batch has more
// than one token (llama.cpp's GEMM order), else lanes64 (its vector-dot order).
void attend_per_token(OpContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const backend::AttentionParams& p, const AttentionTables& tab, const std::vector<int64_t>& tokens,
                      bool lanes16, const Tensor& out) {
  const int group = p.n_head / p.n_head_kv;
  const bool f16 = k_cache.type == backend::DType::f16;
  const RowKernels kernels = row_kernels(ctx.isa);
  const OrderedKernels ordered = ordered_kernels(ctx.isa);
  const int hd = p.head_dim;
  const bool qk16 = lanes16 && hd % 16 == 0;
  const int pv_lanes = lanes16 ? 16 : 64;
  const std::byte* k_base = k_cache.row_ptr(0);
  const std::byte* v_base = v_cache.row_ptr(0);
  const std::byte* q_base = q.row_ptr(0);
  std::byte* out_base = out.row_ptr(0);

  const int64_t n_items = int64_t(tokens.size()) * p.n_head_kv;
  TokenScores token_scores(p, tab.token_seq, tab.seq_cells, tokens);  // score_acc partials
  ctx.pool.parallel_for(n_items, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> slots, cells, kv_pos;  // of the visible cells, by increasing position
    std::vector<std::pair<int32_t, int32_t>> by_pos;  // (position, cell)
    std::vector<float> scores, queries(size_t(group) * hd), part;
    std::vector<double> tail(static_cast<size_t>(hd));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = tokens[size_t(item / p.n_head_kv)];
      const int kv_head = int(item % p.n_head_kv);
      const int32_t pos = tab.token_pos[t];
      const int32_t seq = tab.token_seq[t];
      // The sums follow the key positions (llama.cpp's cell index for one sequence),
      // so that they do not depend on where the cache placed a position.
      by_pos.clear();
      for (int32_t c = 0; c < tab.seq_cells[seq]; ++c)
        if (visible(pos, tab.pos_of(seq, c), p.window)) by_pos.emplace_back(tab.pos_of(seq, c), c);
      if (!std::is_sorted(by_pos.begin(), by_pos.end())) std::sort(by_pos.begin(), by_pos.end());
      slots.clear();
      cells.clear();
      kv_pos.clear();
      for (const auto& [kp, c] : by_pos) {
        slots.push_back(tab.slot_of(seq, c));
        cells.push_back(c);
        kv_pos.push_back(kp);
      }
      const int64_t n = int64_t(slots.size());
      const int64_t kv_col = int64_t(kv_head) * hd;
      const auto* q_row = reinterpret_cast<const float*>(q_base + size_t(t) * q.row_stride);
      // Queries of the group, rounded to F16 for an F16 cache (llama.cpp converts them).
      for (int i = 0; i < group * hd; ++i) {
        const float x = q_row[int64_t(kv_head * group) * hd + i];
        queries[size_t(i)] = f16 ? round_f16(x) : x;
      }
      scores.resize(size_t(group * n));
      // Scores for the whole group, one key row at a time.
      for (int64_t j = 0; j < n; ++j) {
        const std::byte* k_row = k_base + size_t(slots[size_t(j)]) * k_cache.row_stride;
        for (int g = 0; g < group; ++g) {
          const float* qh = queries.data() + size_t(g) * hd;
          float s;
          if (f16) {
            const auto* kr = reinterpret_cast<const uint16_t*>(k_row) + kv_col;
            s = qk16 ? ordered.dot16_f16(qh, kr, hd) : ordered.dot64_f16(qh, kr, hd);
          } else {
            const auto* kr = reinterpret_cast<const float*>(k_row) + kv_col;
            s = qk16 ? ordered.dot16_f32(qh, kr, hd) : ordered.dot64_f32(qh, kr, hd);
          }
          s *= p.scale;
          if (p.softcap > 0.0f) s = p.softcap * std::tanh(s / p.softcap);
          scores[size_t(g * n + j)] = s;
        }
      }
      // Probabilities (rounded to F16 for an F16 cache, as llama.cpp converts them).
      for (int g = 0; g < group && n > 0; ++g) {
        float* s = scores.data() + g * n;
        exp_row(s, n, *std::max_element(s, s + n));
        const auto inv = float(1.0 / softmax_total(s, kv_pos.data(), n));
        for (int64_t j = 0; j < n; ++j) s[j] = f16 ? round_f16(s[j] * inv) : s[j] * inv;
      }
      if (float* token_row = token_scores.row(size_t(item / p.n_head_kv)))
        add_group_scores(token_row, p.n_head_kv, kv_head, scores.data(), cells.data(), n, group);
      // Keys at positions below `split` go to lane position % pv_lanes; lanes64 adds
      // the keys from split on (llama.cpp's KV length for one sequence, pos + 1
      // padded to 32, rounded down to 64) in double.
      const int64_t n_kv = std::max<int64_t>(32, (int64_t(pos) + 1 + 31) / 32 * 32);
      const int64_t split = lanes16 ? std::numeric_limits<int64_t>::max() : n_kv / 64 * 64;
      const bool any_lanes = n > 0 && kv_pos[0] < split;  // else (short contexts) all in double
      if (any_lanes) part.assign(size_t(group) * pv_lanes * hd, 0.0f);
      int64_t j = 0;
      for (; j < n && kv_pos[size_t(j)] < split; ++j) {
        const std::byte* v_row = v_base + size_t(slots[size_t(j)]) * v_cache.row_stride;
        const int lane = int(kv_pos[size_t(j)] % pv_lanes);
        for (int g = 0; g < group; ++g) {
          float* a = part.data() + (size_t(g) * pv_lanes + size_t(lane)) * hd;
          const float w = scores[size_t(g * n + j)];
          if (f16) {
            kernels.axpy_f16(a, w, reinterpret_cast<const uint16_t*>(v_row) + kv_col, hd);
          } else {
            kernels.axpy_f32(a, w, reinterpret_cast<const float*>(v_row) + kv_col, hd);
          }
        }
      }
      auto* out_row = reinterpret_cast<float*>(out_base + size_t(t) * out.row_stride);
      for (int g = 0; g < group; ++g) {
        float* oh = out_row + int64_t(kv_head * group + g) * hd;
        if (any_lanes) {
          reduce_lanes(part.data() + size_t(g) * pv_lanes * hd, pv_lanes, hd, oh);
        } else {
          std::fill(oh, oh + hd, 0.0f);
        }
        if (j == n) continue;
        for (int d = 0; d < hd; ++d) tail[size_t(d)] = oh[d];
        for (int64_t jt = j; jt < n; ++jt) {
          const std::byte* v_row = v_base + size_t(slots[size_t(jt)]) * v_cache.row_stride;
          const float w = scores[size_t(g * n + jt)];
          for (int d = 0; d < hd; ++d) {
            const float v = f16 ? fp16_to_fp32(reinterpret_cast<const uint16_t*>(v_row)[kv_col + d])
                                : reinterpret_cast<const float*>(v_row)[kv_col + d];
            tail[size_t(d)] += double(w * v);
          }
        }
        for (int d = 0; d < hd; ++d) oh[d] = float(tail[size_t(d)]);
      }
    }
  });
  token_scores.merge();
}

// The prefill schedule for the query tokens `tokens`, all of sequence row `seq`
// (lanes16 order; head_dim a multiple of 16).
void attend_blocked(OpContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                    const backend::AttentionParams& p, const AttentionTables& tab, int32_t seq,
                    const std::vector<int64_t>& tokens, const Tensor& out) {
  const int group = p.n_head / p.n_head_kv;
  const int hd = p.head_dim;
  const bool f16 = k_cache.type == backend::DType::f16;
  const OrderedKernels ordered = ordered_kernels(ctx.isa);
  // Cells by index (the lanes of the sums follow the cell index), padded to 16;
  // a cell that holds no position has position -1 and zero keys and values.
  const int64_t n_cells = tab.seq_cells[seq];
  const int64_t n_pad = (n_cells + 15) / 16 * 16;
  std::vector<int32_t> cell_pos(size_t(n_pad), -1);
  for (int32_t c = 0; c < n_cells; ++c) cell_pos[size_t(c)] = tab.pos_of(seq, c);
  const auto n_tok = int64_t(tokens.size());
  const int64_t n_blocks = (n_tok + kQueryBlock - 1) / kQueryBlock;
  // Keys [n_pad][hd] and values transposed [hd][n_pad] of one kv head, as f32.
  std::vector<float> keys(size_t(n_pad * hd)), values_t(size_t(n_pad * hd));

  BlockScores block_scores(p, n_blocks, n_pad);  // score_acc partials
  for (int kv_head = 0; kv_head < p.n_head_kv; ++kv_head) {
    const int64_t kv_col = int64_t(kv_head) * hd;
    ctx.pool.parallel_for(n_pad, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const bool held = cell_pos[size_t(c)] >= 0;
        const int64_t slot = held ? tab.slot_of(seq, int32_t(c)) : 0;
        for (int d = 0; d < hd; ++d) {
          keys[size_t(c * hd + d)] = held ? to_f32(k_cache, slot, kv_col + d) : 0.0f;
          values_t[size_t(d * n_pad + c)] = held ? to_f32(v_cache, slot, kv_col + d) : 0.0f;
        }
      }
    });
    ctx.pool.parallel_for(n_blocks, [&](int64_t begin, int64_t end) {
      std::vector<float> queries, scores, result;
      for (int64_t blk = begin; blk < end; ++blk) {
        const int64_t t0 = blk * kQueryBlock, t1 = std::min(n_tok, t0 + kQueryBlock);
        const int64_t rows = (t1 - t0) * group;  // row (i, g): token t0 + i, head kv_head * group + g
        queries.resize(size_t(rows * hd));
        int32_t max_pos = INT32_MIN, min_pos = INT32_MAX;
        for (int64_t i = t0; i < t1; ++i) {
          const int64_t t = tokens[size_t(i)];
          max_pos = std::max(max_pos, tab.token_pos[t]);
          min_pos = std::min(min_pos, tab.token_pos[t]);
          const float* src = q.row_ptr<float>(t) + int64_t(kv_head * group) * hd;
          float* dst = queries.data() + (i - t0) * group * hd;
          for (int e = 0; e < group * hd; ++e) dst[e] = f16 ? round_f16(src[e]) : src[e];
        }
        // Only cells some query of the block can see take part, in whole chunks of 16.
        int64_t lo = n_pad, hi = 0;
        for (int64_t c = 0; c < n_cells; ++c)
          if (visible(max_pos, cell_pos[size_t(c)], 0) && (p.window <= 0 || min_pos - cell_pos[size_t(c)] < p.window)) {
            lo = std::min(lo, c);
            hi = c + 1;
          }
        result.assign(size_t(rows * hd), 0.0f);
        if (hi > lo) {
          lo = lo / 16 * 16;
          hi = (hi + 15) / 16 * 16;
          const int64_t cols = hi - lo;
          scores.resize(size_t(rows * cols));
          ordered.gemm16(int(rows), int(cols), hd, queries.data(), hd, keys.data() + lo * hd, hd, scores.data(),
                         int(cols));
          for (int64_t r = 0; r < rows; ++r) {
            const int32_t pos = tab.token_pos[tokens[size_t(t0 + r / group)]];
            float* s = scores.data() + r * cols;
            float max_score = -std::numeric_limits<float>::infinity();
            for (int64_t j = 0; j < cols; ++j) {
              s[j] *= p.scale;
              if (p.softcap > 0.0f) s[j] = p.softcap * std::tanh(s[j] / p.softcap);
              if (!visible(pos, cell_pos[size_t(lo + j)], p.window)) s[j] = -std::numeric_limits<float>::infinity();
              max_score = std::max(max_score, s[j]);
            }
            if (max_score == -std::numeric_limits<float>::infinity()) {
              std::fill(s, s + cols, 0.0f);  // nothing visible: zeros, as the contract says
              continue;
            }
            exp_row(s, cols, max_score);
            double total = 0.0;
            for (int64_t c0 = 0; c0 < cols; c0 += 16) total += double(Lanes16Scalar::load(s + c0).sum());
            const auto inv = float(1.0 / total);
            for (int64_t j = 0; j < cols; ++j) s[j] = f16 ? round_f16(s[j] * inv) : s[j] * inv;
          }
          if (float* block_row = block_scores.row(blk)) add_block_scores(block_row + lo, scores.data(), rows, cols);
          ordered.gemm16(int(rows), hd, int(cols), scores.data(), int(cols), values_t.data() + lo, int(n_pad),
                         result.data(), hd);
        }
        for (int64_t i = t0; i < t1; ++i) {
          float* dst = out.row_ptr<float>(tokens[size_t(i)]) + int64_t(kv_head * group) * hd;
          std::copy(result.begin() + (i - t0) * group * hd, result.begin() + (i - t0 + 1) * group * hd, dst);
        }
      }
    });
    block_scores.merge(seq, kv_head, n_cells);
  }
}

}  // namespace

void attention(OpContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
               const backend::AttentionParams& p, const Tensor& out) {
  const AttentionTables tab = AttentionTables::of(p);

  // Validate the tables once, on the caller's thread, so workers cannot throw.
  for (int64_t t = 0; t < q.rows; ++t)
    if (tab.token_seq[t] < 0 || tab.token_seq[t] >= p.page_table.rows)
      fail(ErrorCode::invalid_argument, "attention: token {} has sequence row {} outside [0, {})", t,
           tab.token_seq[t], p.page_table.rows);
  for (int64_t s = 0; s < p.page_table.rows; ++s) {
    const int32_t n_cells = tab.seq_cells[s];
    if (n_cells < 0 || n_cells > p.page_table.cols * p.page_tokens || n_cells > p.cell_pos.cols)
      fail(ErrorCode::invalid_argument, "attention: sequence row {} has {} cells, more than its page table holds", s,
           n_cells);
    const int32_t* pages = tab.page_table + s * tab.pages_per_row;
    for (int32_t pg = 0; pg < (n_cells + p.page_tokens - 1) / p.page_tokens; ++pg)
      if (pages[pg] < 0 || int64_t(pages[pg] + 1) * p.page_tokens > k_cache.rows)
        fail(ErrorCode::invalid_argument, "attention: page {} of sequence row {} is outside the cache", pages[pg], s);
  }

  // Query tokens per sequence row. Quantized caches, and (outside batch-invariant mode)
  // sequences of more than kFlashMinCells cells, take the flash schedules
  // (attention_flash.cpp); the rest llama.cpp's orders below.
  const bool quantized = k_cache.type != backend::DType::f16 && k_cache.type != backend::DType::f32;
  std::vector<std::vector<int64_t>> by_seq(size_t(p.page_table.rows)), flash(size_t(p.page_table.rows));
  bool any_flash = false;
  for (int64_t t = 0; t < q.rows; ++t) {
    const int32_t s = tab.token_seq[t];
    const bool long_seq = !ctx.batch_invariant && tab.seq_cells[s] > kFlashMinCells;
    (quantized || long_seq ? flash : by_seq)[size_t(s)].push_back(t);
    any_flash = any_flash || quantized || long_seq;
  }
  if (any_flash) attention_flash(ctx, q, k_cache, v_cache, p, tab, flash, out);

  // Long runs of query tokens take the GEMM schedule.
  std::vector<int64_t> per_token;
  for (int32_t s = 0; s < int32_t(by_seq.size()); ++s) {
    if (int64_t(by_seq[size_t(s)].size()) >= kBlockedMinTokens && p.head_dim % 16 == 0) {
      attend_blocked(ctx, q, k_cache, v_cache, p, tab, s, by_seq[size_t(s)], out);
    } else {
      per_token.insert(per_token.end(), by_seq[size_t(s)].begin(), by_seq[size_t(s)].end());
    }
  }
  // llama.cpp's sums are in GEMM order when its batch has more than one token;
  // batch-invariant sums are in GEMM order always, as the blocked schedule's are.
  if (!per_token.empty())
    attend_per_token(ctx, q, k_cache, v_cache, p, tab, per_token, ctx.batch_invariant || q.rows > 1, out);
}

}  // namespace ember::cpu
