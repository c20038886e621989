// Attention over the paged KV cache on the CPU.
//
// Work items are (query token, kv head) pairs spread over the pool. For each, the
// visible cache slots are listed once; then every query head of the group scores
// each key row while it is in L1, a max-subtracted softmax follows, and the value
// rows are accumulated in the same slot order. K/V rows are F16 or F32; the inner
// products use F16C + FMA (AVX2) or AVX-512 when the backend's level allows.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/fail.hpp"
#include "common/fp16.hpp"
#include "cpu/ops/ops.hpp"
#include "cpu/ops/vec_math.hpp"

#if defined(EMBER_X86)
#include <immintrin.h>
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
  for (int i = 0; i < n; ++i) acc[i] += w * fp16_to_fp32(v[i]);
}
float dot_f32_scalar(const float* q, const float* k, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += q[i] * k[i];
  return s;
}
void axpy_f32_scalar(float* acc, float w, const float* v, int n) {
  for (int i = 0; i < n; ++i) acc[i] += w * v[i];
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

struct RowKernels {
  float (*dot_f16)(const float*, const uint16_t*, int);
  void (*axpy_f16)(float*, float, const uint16_t*, int);
  float (*dot_f32)(const float*, const float*, int);
  void (*axpy_f32)(float*, float, const float*, int);
};

RowKernels row_kernels(Isa isa) {
#if defined(EMBER_X86)
  if (isa == Isa::avx512) return {dot_f16_avx512, axpy_f16_avx512, dot_f32_avx2, axpy_f32_avx2};
  if (isa == Isa::avx2) return {dot_f16_avx2, axpy_f16_avx2, dot_f32_avx2, axpy_f32_avx2};
#endif
  return {dot_f16_scalar, axpy_f16_scalar, dot_f32_scalar, axpy_f32_scalar};
}

EMBER_VECTORIZE float softmax_in_place(float* s, int64_t n, float max_score) {
  float total = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = exp_approx(s[j] - max_score);
    total += s[j];
  }
  return total;
}

}  // namespace

void attention(OpContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
               const backend::AttentionParams& p, const Tensor& out) {
  const int group = p.n_head / p.n_head_kv;
  const bool f16 = k_cache.type == backend::DType::f16;
  const RowKernels kernels = row_kernels(ctx.isa);
  const int hd = p.head_dim;

  // Validate the tables once, on the caller's thread, so workers cannot throw.
  for (int64_t t = 0; t < q.rows; ++t) {
    const int32_t seq = *p.token_seq.row_ptr<int32_t>(t);
    if (seq < 0 || seq >= p.page_table.rows)
      fail(ErrorCode::invalid_argument, "attention: token {} has sequence row {} outside [0, {})", t, seq,
           p.page_table.rows);
  }
  for (int64_t s = 0; s < p.page_table.rows; ++s) {
    const int32_t n_cells = *p.seq_cells.row_ptr<int32_t>(s);
    if (n_cells < 0 || n_cells > p.page_table.cols * p.page_tokens)
      fail(ErrorCode::invalid_argument, "attention: sequence row {} has {} cells, more than its page table holds", s,
           n_cells);
    const int32_t* pages = p.page_table.row_ptr<int32_t>(s);
    for (int32_t pg = 0; pg < (n_cells + p.page_tokens - 1) / p.page_tokens; ++pg)
      if (pages[pg] < 0 || int64_t(pages[pg] + 1) * p.page_tokens > k_cache.rows)
        fail(ErrorCode::invalid_argument, "attention: page {} of sequence row {} is outside the cache", pages[pg], s);
  }

  const int64_t n_items = q.rows * p.n_head_kv;
  ctx.pool.parallel_for(n_items, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> slots;
    std::vector<float> scores;
    std::vector<float> acc(size_t(group) * hd);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / p.n_head_kv;
      const int kv_head = int(item % p.n_head_kv);
      const int32_t pos = *p.token_pos.row_ptr<int32_t>(t);
      const int32_t seq = *p.token_seq.row_ptr<int32_t>(t);
      const int32_t n_cells = *p.seq_cells.row_ptr<int32_t>(seq);
      const int32_t* pages = p.page_table.row_ptr<int32_t>(seq);
      slots.clear();
      for (int32_t c = 0; c < n_cells; ++c) {
        const int64_t slot = int64_t(pages[c / p.page_tokens]) * p.page_tokens + c % p.page_tokens;
        const int32_t kv_pos = *p.slot_pos.row_ptr<int32_t>(slot);
        if (kv_pos < 0 || kv_pos > pos) continue;
        if (p.window > 0 && pos - kv_pos >= p.window) continue;
        slots.push_back(slot);
      }
      const int64_t n = int64_t(slots.size());
      const int64_t kv_col = int64_t(kv_head) * hd;
      scores.resize(size_t(group * n));
      // Scores for the whole group, one key row at a time.
      for (int64_t j = 0; j < n; ++j) {
        for (int g = 0; g < group; ++g) {
          const float* qh = q.row_ptr<float>(t) + int64_t(kv_head * group + g) * hd;
          float s = f16 ? kernels.dot_f16(qh, k_cache.row_ptr<uint16_t>(slots[size_t(j)]) + kv_col, hd)
                        : kernels.dot_f32(qh, k_cache.row_ptr<float>(slots[size_t(j)]) + kv_col, hd);
          s *= p.scale;
          if (p.softcap > 0.0f) s = p.softcap * std::tanh(s / p.softcap);
          scores[size_t(g * n + j)] = s;
        }
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::vector<float> inv_total(size_t(group), 0.0f);
      for (int g = 0; g < group && n > 0; ++g) {
        float* s = scores.data() + g * n;
        const float max_score = *std::max_element(s, s + n);
        inv_total[size_t(g)] = 1.0f / softmax_in_place(s, n, max_score);
      }
      for (int64_t j = 0; j < n; ++j) {
        for (int g = 0; g < group; ++g) {
          const float w = scores[size_t(g * n + j)];
          float* a = acc.data() + size_t(g) * hd;
          if (f16) {
            kernels.axpy_f16(a, w, v_cache.row_ptr<uint16_t>(slots[size_t(j)]) + kv_col, hd);
          } else {
            kernels.axpy_f32(a, w, v_cache.row_ptr<float>(slots[size_t(j)]) + kv_col, hd);
          }
        }
      }
      for (int g = 0; g < group; ++g) {
        float* oh = out.row_ptr<float>(t) + int64_t(kv_head * group + g) * hd;
        const float* a = acc.data() + size_t(g) * hd;
        for (int d = 0; d < hd; ++d) oh[d] = a[d] * inv_total[size_t(g)];
      }
    }
  });
}

}  // namespace ember::cpu
