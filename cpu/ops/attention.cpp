// Attention over the paged KV cache on the CPU, in two schedules.
//
// Few query tokens of a sequence (decode): work items are (query token, kv head)
// pairs spread over the pool. For each, the visible cache slots are listed once;
// then every query head of the group scores each key row while it is in L1, a
// max-subtracted softmax follows, and the value rows are accumulated in the same
// slot order. K/V rows are F16 or F32; the inner products use F16C + FMA (AVX2)
// or AVX-512 when the backend's level allows.
//
// Many query tokens of a sequence (prefill): the sequence's keys and values of
// each kv head are converted to f32 matrices once, and blocks of query rows
// (tokens x heads of the group) become two GEMMs, scores = Q K^T and out = P V,
// with the causal / sliding-window mask and the softmax in between.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/fail.hpp"
#include "common/fp16.hpp"
#include "cpu/kernels/gemm_f32.hpp"
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


// Sequences with at least this many query tokens in the batch use the GEMM schedule.
constexpr int64_t kBlockedMinTokens = 8;
// Query tokens per GEMM task.
constexpr int64_t kQueryBlock = 32;

// Host views of the index tensors, read once per op.
struct Tables {
  const int32_t* token_pos;
  const int32_t* token_seq;
  const int32_t* seq_cells;
  const int32_t* slot_pos;
  const int32_t* page_table;
  int64_t pages_per_row;
  int page_tokens;
  int64_t slot_of(int32_t seq, int32_t cell) const {
    return int64_t(page_table[seq * pages_per_row + cell / page_tokens]) * page_tokens + cell % page_tokens;
  }
};

bool visible(int32_t query_pos, int32_t kv_pos, int window) {
  return kv_pos >= 0 && kv_pos <= query_pos && (window <= 0 || query_pos - kv_pos < window);
}

float to_f32(const Tensor& cache, int64_t slot, int64_t col) {
  return cache.type == backend::DType::f16 ? fp16_to_fp32(cache.row_ptr<uint16_t>(slot)[col])
                                           : cache.row_ptr<float>(slot)[col];
}

// The decode schedule for the tokens in `tokens`.
void attend_per_token(OpContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const backend::AttentionParams& p, const Tables& tab, const std::vector<int64_t>& tokens,
                      const Tensor& out) {
  const int group = p.n_head / p.n_head_kv;
  const bool f16 = k_cache.type == backend::DType::f16;
  const RowKernels kernels = row_kernels(ctx.isa);
  const int hd = p.head_dim;
  const std::byte* k_base = k_cache.row_ptr(0);
  const std::byte* v_base = v_cache.row_ptr(0);
  const std::byte* q_base = q.row_ptr(0);
  std::byte* out_base = out.row_ptr(0);

  const int64_t n_items = int64_t(tokens.size()) * p.n_head_kv;
  ctx.pool.parallel_for(n_items, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> slots;
    std::vector<float> scores;
    std::vector<float> acc(static_cast<size_t>(group) * hd), inv_total(static_cast<size_t>(group));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = tokens[size_t(item / p.n_head_kv)];
      const int kv_head = int(item % p.n_head_kv);
      const int32_t pos = tab.token_pos[t];
      const int32_t seq = tab.token_seq[t];
      slots.clear();
      for (int32_t c = 0; c < tab.seq_cells[seq]; ++c) {
        const int64_t slot = tab.slot_of(seq, c);
        if (visible(pos, tab.slot_pos[slot], p.window)) slots.push_back(slot);
      }
      const int64_t n = int64_t(slots.size());
      const int64_t kv_col = int64_t(kv_head) * hd;
      const auto* q_row = reinterpret_cast<const float*>(q_base + size_t(t) * q.row_stride);
      scores.resize(size_t(group * n));
      // Scores for the whole group, one key row at a time.
      for (int64_t j = 0; j < n; ++j) {
        const std::byte* k_row = k_base + size_t(slots[size_t(j)]) * k_cache.row_stride;
        for (int g = 0; g < group; ++g) {
          const float* qh = q_row + int64_t(kv_head * group + g) * hd;
          float s = f16 ? kernels.dot_f16(qh, reinterpret_cast<const uint16_t*>(k_row) + kv_col, hd)
                        : kernels.dot_f32(qh, reinterpret_cast<const float*>(k_row) + kv_col, hd);
          s *= p.scale;
          if (p.softcap > 0.0f) s = p.softcap * std::tanh(s / p.softcap);
          scores[size_t(g * n + j)] = s;
        }
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int g = 0; g < group && n > 0; ++g) {
        float* s = scores.data() + g * n;
        inv_total[size_t(g)] = 1.0f / softmax_in_place(s, n, *std::max_element(s, s + n));
      }
      for (int64_t j = 0; j < n; ++j) {
        const std::byte* v_row = v_base + size_t(slots[size_t(j)]) * v_cache.row_stride;
        for (int g = 0; g < group; ++g) {
          const float w = scores[size_t(g * n + j)];
          float* a = acc.data() + size_t(g) * hd;
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
        const float* a = acc.data() + size_t(g) * hd;
        const float scale = n > 0 ? inv_total[size_t(g)] : 0.0f;
        for (int d = 0; d < hd; ++d) oh[d] = a[d] * scale;
      }
    }
  });
}

// The prefill schedule for the query tokens `tokens`, all of sequence row `seq`.
void attend_blocked(OpContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                    const backend::AttentionParams& p, const Tables& tab, int32_t seq,
                    const std::vector<int64_t>& tokens, const Tensor& out) {
  const int group = p.n_head / p.n_head_kv;
  const int hd = p.head_dim;
  // Cells of the sequence that hold a position.
  std::vector<int64_t> cell_slot;
  std::vector<int32_t> cell_pos;
  for (int32_t c = 0; c < tab.seq_cells[seq]; ++c) {
    const int64_t slot = tab.slot_of(seq, c);
    if (tab.slot_pos[slot] < 0) continue;
    cell_slot.push_back(slot);
    cell_pos.push_back(tab.slot_pos[slot]);
  }
  const auto n_cells = int64_t(cell_slot.size());
  const auto n_tok = int64_t(tokens.size());
  const int64_t n_blocks = (n_tok + kQueryBlock - 1) / kQueryBlock;
  // Keys and values of one kv head as f32: [n_cells, hd] each.
  std::vector<float> keys(size_t(n_cells * hd)), values(size_t(n_cells * hd));

  for (int kv_head = 0; kv_head < p.n_head_kv; ++kv_head) {
    const int64_t kv_col = int64_t(kv_head) * hd;
    ctx.pool.parallel_for(n_cells, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c)
        for (int d = 0; d < hd; ++d) {
          keys[size_t(c * hd + d)] = to_f32(k_cache, cell_slot[size_t(c)], kv_col + d);
          values[size_t(c * hd + d)] = to_f32(v_cache, cell_slot[size_t(c)], kv_col + d);
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
          std::copy(src, src + group * hd, queries.begin() + (i - t0) * group * hd);
        }
        // Only cells some query of the block can see take part.
        int64_t lo = 0, hi = n_cells;
        while (hi > lo && !(cell_pos[size_t(hi - 1)] <= max_pos)) --hi;
        if (p.window > 0)
          while (lo < hi && !(min_pos - cell_pos[size_t(lo)] < p.window)) ++lo;
        const int64_t cols = hi - lo;
        scores.resize(size_t(rows * std::max<int64_t>(cols, 1)));
        result.assign(size_t(rows * hd), 0.0f);
        if (cols > 0) {
          gemm_nt(ctx.isa, int(rows), int(cols), hd, queries.data(), hd, keys.data() + lo * hd, hd, scores.data(),
                  int(cols), p.scale);
          for (int64_t r = 0; r < rows; ++r) {
            const int32_t pos = tab.token_pos[tokens[size_t(t0 + r / group)]];
            float* s = scores.data() + r * cols;
            float max_score = -std::numeric_limits<float>::infinity();
            for (int64_t j = 0; j < cols; ++j) {
              if (p.softcap > 0.0f) s[j] = p.softcap * std::tanh(s[j] / p.softcap);
              if (!visible(pos, cell_pos[size_t(lo + j)], p.window)) s[j] = -std::numeric_limits<float>::infinity();
              max_score = std::max(max_score, s[j]);
            }
            if (max_score == -std::numeric_limits<float>::infinity()) {
              std::fill(s, s + cols, 0.0f);  // nothing visible: zeros, as the contract says
              continue;
            }
            const float inv = 1.0f / softmax_in_place(s, cols, max_score);
            for (int64_t j = 0; j < cols; ++j) s[j] *= inv;
          }
          gemm_nn(ctx.isa, int(rows), hd, int(cols), scores.data(), int(cols), values.data() + lo * hd, hd,
                  result.data(), hd);
        }
        for (int64_t i = t0; i < t1; ++i) {
          float* dst = out.row_ptr<float>(tokens[size_t(i)]) + int64_t(kv_head * group) * hd;
          std::copy(result.begin() + (i - t0) * group * hd, result.begin() + (i - t0 + 1) * group * hd, dst);
        }
      }
    });
  }
}

}  // namespace

void attention(OpContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
               const backend::AttentionParams& p, const Tensor& out) {
  const Tables tab{p.token_pos.row_ptr<int32_t>(0), p.token_seq.row_ptr<int32_t>(0), p.seq_cells.row_ptr<int32_t>(0),
                   p.slot_pos.row_ptr<int32_t>(0),  p.page_table.row_ptr<int32_t>(0), p.page_table.cols,
                   p.page_tokens};

  // Validate the tables once, on the caller's thread, so workers cannot throw.
  for (int64_t t = 0; t < q.rows; ++t)
    if (tab.token_seq[t] < 0 || tab.token_seq[t] >= p.page_table.rows)
      fail(ErrorCode::invalid_argument, "attention: token {} has sequence row {} outside [0, {})", t,
           tab.token_seq[t], p.page_table.rows);
  for (int64_t s = 0; s < p.page_table.rows; ++s) {
    const int32_t n_cells = tab.seq_cells[s];
    if (n_cells < 0 || n_cells > p.page_table.cols * p.page_tokens)
      fail(ErrorCode::invalid_argument, "attention: sequence row {} has {} cells, more than its page table holds", s,
           n_cells);
    const int32_t* pages = tab.page_table + s * tab.pages_per_row;
    for (int32_t pg = 0; pg < (n_cells + p.page_tokens - 1) / p.page_tokens; ++pg)
      if (pages[pg] < 0 || int64_t(pages[pg] + 1) * p.page_tokens > k_cache.rows)
        fail(ErrorCode::invalid_argument, "attention: page {} of sequence row {} is outside the cache", pages[pg], s);
  }

  // Query tokens per sequence row: long runs take the GEMM schedule.
  std::vector<std::vector<int64_t>> by_seq(size_t(p.page_table.rows));
  for (int64_t t = 0; t < q.rows; ++t) by_seq[size_t(tab.token_seq[t])].push_back(t);
  std::vector<int64_t> per_token;
  for (int32_t s = 0; s < int32_t(by_seq.size()); ++s) {
    if (int64_t(by_seq[size_t(s)].size()) >= kBlockedMinTokens) {
      attend_blocked(ctx, q, k_cache, v_cache, p, tab, s, by_seq[size_t(s)], out);
    } else {
      per_token.insert(per_token.end(), by_seq[size_t(s)].begin(), by_seq[size_t(s)].end());
    }
  }
  if (!per_token.empty()) attend_per_token(ctx, q, k_cache, v_cache, p, tab, per_token, out);
}

}  // namespace ember::cpu
