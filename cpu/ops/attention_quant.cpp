// Attention over quantized KV caches (INT8 / INT4 with per-group scales,
// quant/kv_formats.hpp) on the CPU. Keys and values are read in place; no full-size
// f32 copy of a sequence's cache is ever made.
//
// Both schedules work in the formats' stored domain (kv_rows.hpp): INT4 rows hold the
// group-wise rotated values y = R_G x, so each query head is rotated once per work item,
// scored against y (dot(R_G q, y) = dot(q, x)), the probability-weighted sum of the stored
// value rows is accumulated, and the inverse rotation R_G^T is applied once to that sum
// (it is linear). For INT8 both are no-ops.
//
// Few query tokens of a sequence (decode): work items are (query token, kv head) pairs
// spread over the pool, as attention.cpp's per-token schedule. Each visible key row is
// scored for every query head of the group: with one head per group straight from the
// quantized bytes (kv_rows.hpp dot), else decoded once into an L1-sized row and reused
// by the group's heads. A max-subtracted softmax follows and the value rows are
// accumulated the same way (axpy).
//
// Many query tokens of a sequence (prefill): items are (block of kQueryBlock query
// tokens, kv head). A block walks the cells it can see in tiles of kTile: the tile's
// key and value rows are decoded (stored values) into per-thread f32 buffers (kTile x head_dim, reused
// by all tokens x heads of the block), scores = Q K^T and P V are small GEMMs, and the
// softmax is streamed over the tiles (online softmax: running max and sum per query
// row, the partial output rescaled when the max grows; Milakov & Gimelshein 2018,
// as in FlashAttention, Dao et al. 2022). When score_acc is wanted the block makes two
// passes instead: the first finds each row's max and sum, the second computes the
// normalised probabilities, adds them to score_acc and accumulates P V.
//
// score_acc is never written by two threads: the decode schedule keeps one partial row
// per query token (attention_scores.hpp), the prefill schedule one partial per thread;
// both are merged in a fixed order after the parallel part, so results do not depend on
// thread timing.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/kernels/gemm_f32.hpp"
#include "cpu/ops/attention_scores.hpp"
#include "cpu/ops/kv_rows.hpp"
#include "cpu/ops/ops.hpp"
#include "cpu/ops/vec_math.hpp"
#include "quant/kv_formats.hpp"

namespace ember::cpu {
namespace {

// Sequences with at least this many query tokens in the batch use the tiled schedule.
constexpr int64_t kTiledMinTokens = 8;
// Query tokens per tiled work item.
constexpr int64_t kQueryBlock = 32;
// Cells per decoded tile: kTile x head_dim f32 keys plus as many values (64 KiB each at
// head_dim 128) stay in L2 while every query row of the block uses them.
constexpr int64_t kTile = 128;
// Up to this many query heads per kv head, key/value rows are read straight from the
// quantized bytes; larger groups decode each row once and share it.
constexpr int kFusedMaxGroup = 1;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Host views of the index tensors (validated by attention() before it dispatches here).

float score_of(float dot, const backend::AttentionParams& p) {
  const float s = dot * p.scale;
  return p.softcap > 0.0f ? p.softcap * std::tanh(s / p.softcap) : s;
}

// s[j] = e^(s[j] - max), masked (-inf) entries 0; returns the sum.
EMBER_VECTORIZE float exp_masked(float* s, int64_t n, float max_score) {
  float total = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float e = exp_approx(s[j] - max_score);
    s[j] = s[j] == kNegInf ? 0.0f : e;
    total += s[j];
  }
  return total;
}

float max_of(const float* s, int64_t n) {
  float m = kNegInf;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
  return m;
}

// The decode schedule for the tokens in `tokens`.
void attend_per_token(OpContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const backend::AttentionParams& p, const AttentionTables& tab, const std::vector<int64_t>& tokens,
                      const Tensor& out) {
  const int group = p.n_head / p.n_head_kv;
  const int hd = p.head_dim;
  const KvRowKernels kern = kv_row_kernels(ctx.isa, k_cache.type);
  const size_t head_bytes = quant::row_bytes(k_cache.type, hd);
  const bool fused = group <= kFusedMaxGroup;
  const std::byte* k_base = k_cache.row_ptr(0);
  const std::byte* v_base = v_cache.row_ptr(0);

  const int64_t n_items = int64_t(tokens.size()) * p.n_head_kv;
  TokenScores token_scores(p, tab.token_seq, tab.seq_cells, tokens);  // score_acc partials
  ctx.pool.parallel_for(n_items, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> slots;
    std::vector<int32_t> cells;
    std::vector<float> scores, row(static_cast<size_t>(hd));
    std::vector<float> acc(static_cast<size_t>(group) * hd), inv_total(static_cast<size_t>(group));
    std::vector<float> q_stored(static_cast<size_t>(group) * hd);  // the group's query heads, rotated
    for (int64_t item = begin; item < end; ++item) {
      const size_t i = size_t(item / p.n_head_kv);
      const int64_t t = tokens[i];
      const int kv_head = int(item % p.n_head_kv);
      const int32_t pos = tab.token_pos[t];
      const int32_t seq = tab.token_seq[t];
      slots.clear();
      cells.clear();
      for (int32_t c = 0; c < tab.seq_cells[seq]; ++c)
        if (visible(pos, tab.pos_of(seq, c), p.window)) slots.push_back(tab.slot_of(seq, c)), cells.push_back(c);
      const auto n = int64_t(slots.size());
      const size_t head_offset = size_t(kv_head) * head_bytes;
      const float* q_heads = q.row_ptr<float>(t) + int64_t(kv_head) * group * hd;  // the group's heads
      std::copy(q_heads, q_heads + group * hd, q_stored.begin());
      kern.rotate(q_stored.data(), group * hd);
      scores.resize(size_t(group * n));
      for (int64_t j = 0; j < n; ++j) {
        const std::byte* k_row = k_base + size_t(slots[size_t(j)]) * k_cache.row_stride + head_offset;
        if (fused) {
          for (int g = 0; g < group; ++g)
            scores[size_t(g * n + j)] = score_of(kern.dot(q_stored.data() + g * hd, k_row, hd), p);
        } else {
          kern.decode_stored(k_row, row.data(), hd);
          for (int g = 0; g < group; ++g)
            scores[size_t(g * n + j)] = score_of(kern.dot_f32(q_stored.data() + g * hd, row.data(), hd), p);
        }
      }
      for (int g = 0; g < group && n > 0; ++g) {
        float* s = scores.data() + g * n;
        inv_total[size_t(g)] = 1.0f / exp_masked(s, n, max_of(s, n));
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < n; ++j) {
        const std::byte* v_row = v_base + size_t(slots[size_t(j)]) * v_cache.row_stride + head_offset;
        if (fused) {
          for (int g = 0; g < group; ++g) kern.axpy(acc.data() + size_t(g) * hd, scores[size_t(g * n + j)], v_row, hd);
        } else {
          kern.decode_stored(v_row, row.data(), hd);
          for (int g = 0; g < group; ++g)
            kern.axpy_f32(acc.data() + size_t(g) * hd, scores[size_t(g * n + j)], row.data(), hd);
        }
      }
      kern.unrotate(acc.data(), group * hd);
      float* out_heads = out.row_ptr<float>(t) + int64_t(kv_head) * group * hd;
      for (int g = 0; g < group; ++g) {
        const float scale = n > 0 ? inv_total[size_t(g)] : 0.0f;
        for (int d = 0; d < hd; ++d) out_heads[g * hd + d] = acc[size_t(g * hd + d)] * scale;
      }
      if (float* token_row = token_scores.row(i)) {
        for (int g = 0; g < group && n > 0; ++g)
          for (int64_t j = 0; j < n; ++j) scores[size_t(g * n + j)] *= inv_total[size_t(g)];
        add_group_scores(token_row, p.n_head_kv, kv_head, scores.data(), cells.data(), n, group);
      }
    }
  });
  token_scores.merge();
}

// The prefill schedule for the query tokens `tokens`, all of sequence row `seq`.
void attend_tiled(OpContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                  const backend::AttentionParams& p, const AttentionTables& tab, int32_t seq, const std::vector<int64_t>& tokens,
                  const Tensor& out) {
  const int group = p.n_head / p.n_head_kv;
  const int hd = p.head_dim;
  const int n_kv = p.n_head_kv;
  const KvRowKernels kern = kv_row_kernels(ctx.isa, k_cache.type);
  const size_t head_bytes = quant::row_bytes(k_cache.type, hd);
  const bool want_scores = p.score_acc.rows > 0;
  // Cells of the sequence that hold a position: their cell index, slot and position.
  std::vector<int32_t> cell_index, cell_pos;
  std::vector<int64_t> cell_slot;
  for (int32_t c = 0; c < tab.seq_cells[seq]; ++c) {
    const int32_t cell_position = tab.pos_of(seq, c);
    if (cell_position < 0) continue;
    cell_index.push_back(c);
    cell_slot.push_back(tab.slot_of(seq, c));
    cell_pos.push_back(cell_position);
  }
  const auto n_cells = int64_t(cell_slot.size());
  const auto n_tok = int64_t(tokens.size());
  const int64_t n_blocks = (n_tok + kQueryBlock - 1) / kQueryBlock;
  const int64_t n_items = n_blocks * n_kv;
  // Items are dealt round-robin (thread i takes items i, i + n_threads, ...), so that each
  // thread gets early (short) and late (long) causal blocks alike.
  const int n_threads = int(std::min<int64_t>(ctx.pool.size(), n_items));
  // Per thread: summed probabilities per (kv head, compacted cell), [n_kv][n_cells].
  std::vector<std::vector<float>> partial_scores(static_cast<size_t>(n_threads));

  ctx.pool.run([&](int index, int) {
    if (index >= n_threads) return;
    const int64_t max_rows = kQueryBlock * group;
    std::vector<float> queries(size_t(max_rows * hd)), keys(size_t(kTile * hd)), values(size_t(kTile * hd));
    std::vector<float> scores(size_t(max_rows * kTile)), product(size_t(max_rows * hd));
    std::vector<float> acc_out(size_t(max_rows * hd));  // unnormalised (online) or final output rows
    std::vector<float> row_max(static_cast<size_t>(max_rows)), row_sum(static_cast<size_t>(max_rows));
    std::vector<int32_t> row_pos(static_cast<size_t>(max_rows));
    std::vector<float>& my_scores = partial_scores[size_t(index)];
    if (want_scores) my_scores.assign(size_t(n_kv * n_cells), 0.0f);

    for (int64_t item = index; item < n_items; item += n_threads) {
      const int64_t blk = item / n_kv;
      const int kv_head = int(item % n_kv);
      const size_t head_offset = size_t(kv_head) * head_bytes;
      const int64_t t0 = blk * kQueryBlock, t1 = std::min(n_tok, t0 + kQueryBlock);
      const int64_t rows = (t1 - t0) * group;  // row (i, g): token t0 + i, head kv_head * group + g
      int32_t max_pos = INT32_MIN, min_pos = INT32_MAX;
      for (int64_t i = t0; i < t1; ++i) {
        const int64_t t = tokens[size_t(i)];
        const int32_t pos = tab.token_pos[t];
        max_pos = std::max(max_pos, pos);
        min_pos = std::min(min_pos, pos);
        const float* src = q.row_ptr<float>(t) + int64_t(kv_head) * group * hd;
        std::copy(src, src + group * hd, queries.begin() + (i - t0) * group * hd);
        for (int g = 0; g < group; ++g) row_pos[size_t((i - t0) * group + g)] = pos;
      }
      kern.rotate(queries.data(), rows * hd);
      // Only cells some query of the block can see take part.
      int64_t lo = 0, hi = n_cells;
      while (hi > lo && !(cell_pos[size_t(hi - 1)] <= max_pos)) --hi;
      if (p.window > 0)
        while (lo < hi && !(min_pos - cell_pos[size_t(lo)] < p.window)) ++lo;

      std::fill(acc_out.begin(), acc_out.begin() + rows * hd, 0.0f);
      std::fill(row_max.begin(), row_max.begin() + rows, kNegInf);
      std::fill(row_sum.begin(), row_sum.begin() + rows, 0.0f);
      const int passes = want_scores ? 2 : 1;
      for (int pass = 0; pass < passes; ++pass) {
        const bool stats_only = pass + 1 < passes;
        for (int64_t c0 = lo; c0 < hi; c0 += kTile) {
          const int64_t tc = std::min(kTile, hi - c0);
          for (int64_t j = 0; j < tc; ++j)
            kern.decode_stored(k_cache.row_ptr(cell_slot[size_t(c0 + j)]) + head_offset, keys.data() + j * hd, hd);
          gemm_nt(ctx.isa, int(rows), int(tc), hd, queries.data(), hd, keys.data(), hd, scores.data(), int(tc),
                  p.scale);
          bool any_visible = false;
          for (int64_t r = 0; r < rows; ++r) {
            float* s = scores.data() + r * tc;
            const int32_t pos = row_pos[size_t(r)];
            for (int64_t j = 0; j < tc; ++j) {
              if (p.softcap > 0.0f) s[j] = p.softcap * std::tanh(s[j] / p.softcap);
              if (!visible(pos, cell_pos[size_t(c0 + j)], p.window)) s[j] = kNegInf;
            }
            const float tile_max = max_of(s, tc);
            if (tile_max == kNegInf) {
              std::fill(s, s + tc, 0.0f);
              continue;
            }
            any_visible = true;
            float& running_max = row_max[size_t(r)];
            float& running_sum = row_sum[size_t(r)];
            if (stats_only || !want_scores) {
              // Online softmax: fold the tile into the running max and sum (and output).
              const float new_max = std::max(running_max, tile_max);
              if (running_max != kNegInf && new_max > running_max) {
                const float alpha = exp_approx(running_max - new_max);
                running_sum *= alpha;
                if (!stats_only)
                  for (int d = 0; d < hd; ++d) acc_out[size_t(r * hd + d)] *= alpha;
              }
              running_max = new_max;
              running_sum += exp_masked(s, tc, running_max);
            } else {
              // Second pass: the row's max and sum are final, the probabilities exact.
              exp_masked(s, tc, running_max);
              const float inv = 1.0f / running_sum;
              for (int64_t j = 0; j < tc; ++j) s[j] *= inv;
            }
          }
          if (stats_only || !any_visible) continue;
          if (want_scores) {
            float* dst = my_scores.data() + int64_t(kv_head) * n_cells + c0;
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t j = 0; j < tc; ++j) dst[j] += scores[size_t(r * tc + j)];
          }
          for (int64_t j = 0; j < tc; ++j)
            kern.decode_stored(v_cache.row_ptr(cell_slot[size_t(c0 + j)]) + head_offset, values.data() + j * hd, hd);
          gemm_nn(ctx.isa, int(rows), hd, int(tc), scores.data(), int(tc), values.data(), hd, product.data(), hd);
          for (int64_t x = 0; x < rows * hd; ++x) acc_out[size_t(x)] += product[size_t(x)];
        }
      }
      kern.unrotate(acc_out.data(), rows * hd);
      for (int64_t r = 0; r < rows; ++r) {
        const float sum = row_sum[size_t(r)];
        const float scale = want_scores ? 1.0f : (sum > 0.0f ? 1.0f / sum : 0.0f);
        const int64_t i = t0 + r / group;
        float* dst = out.row_ptr<float>(tokens[size_t(i)]) + (int64_t(kv_head) * group + r % group) * hd;
        for (int d = 0; d < hd; ++d) dst[d] = acc_out[size_t(r * hd + d)] * scale;
      }
    }
  });

  if (!want_scores) return;
  float* acc_row = p.score_acc.row_ptr<float>(seq);
  for (int kv_head = 0; kv_head < n_kv; ++kv_head)
    for (int64_t c = 0; c < n_cells; ++c) {
      float sum = 0.0f;
      for (const std::vector<float>& part : partial_scores)
        if (!part.empty()) sum += part[size_t(kv_head * n_cells + c)];
      acc_row[int64_t(cell_index[size_t(c)]) * n_kv + kv_head] += sum;
    }
}

}  // namespace

void attention_quant(OpContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const backend::AttentionParams& p, const Tensor& out) {
  const AttentionTables tab = AttentionTables::of(p);

  // Query tokens per sequence row: long runs take the tiled schedule.
  std::vector<std::vector<int64_t>> by_seq(size_t(p.page_table.rows));
  for (int64_t t = 0; t < q.rows; ++t) by_seq[size_t(tab.token_seq[t])].push_back(t);
  std::vector<int64_t> per_token;
  for (int32_t s = 0; s < int32_t(by_seq.size()); ++s) {
    if (int64_t(by_seq[size_t(s)].size()) >= kTiledMinTokens) {
      attend_tiled(ctx, q, k_cache, v_cache, p, tab, s, by_seq[size_t(s)], out);
    } else {
      per_token.insert(per_token.end(), by_seq[size_t(s)].begin(), by_seq[size_t(s)].end());
    }
  }
  if (!per_token.empty()) attend_per_token(ctx, q, k_cache, v_cache, p, tab, per_token, out);
}

}  // namespace ember::cpu
