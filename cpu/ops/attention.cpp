// Attention over the paged KV cache on the CPU. Quantized caches and long sequences
// (more than kFlashMinCells cells) take the flash schedules of attention_flash.cpp;
// the rest (F16 and F32 caches) takes one of two schedules here, both adding
// their products in llama.cpp's order (cpu/ops/levels/lanes16.hpp):
// queries and probabilities are rounded to F16 for an F16 cache, the softmax uses
// exp_fma and llama.cpp's partial sums.
//
// Few query tokens of a sequence (decode): work items are (query token, kv head)
// pairs spread over the pool. For each, the visible cache slots are listed once;
// then every query head of the group scores each key row while it is in L1, a
// max-subtracted softmax follows, and the value rows are accumulated in the same
// slot order. K/V rows are F16 or F32; the inner products are the level's
// (OpKernels: F16C + FMA at AVX2, AVX-512, NEON at every ARM64 level).
//
// Many query tokens of a sequence (prefill): the sequence's keys and values of
// each kv head are converted to f32 matrices once (values transposed), and blocks
// of query rows (tokens x heads of the group) become two GEMMs in lanes16 order,
// scores = Q K^T and out = P V, with the causal / sliding-window mask and the
// softmax in between.
#include <algorithm>
#include <atomic>
#include <utility>
#include <cmath>
#include <limits>
#include <vector>

#include "common/fail.hpp"
#include "common/fp16.hpp"
#include "cpu/kernels/op_kernels.hpp"
#include "cpu/ops/attention_flash.hpp"
#include "cpu/ops/attention_scores.hpp"
#include "cpu/ops/levels/lanes16.hpp"
#include "cpu/ops/ops.hpp"

namespace ember::cpu {
namespace {

// Sequences with more cells than this take the flash schedules (attention_flash.cpp):
// up to here F16 results are llama.cpp's bit for bit (docs/model.md), past it the
// tiled and split-K kernels read the cache at memory speed.
constexpr int32_t kFlashMinCells = 1024;
// Sequences with at least this many query tokens in the batch use the GEMM schedule.
constexpr int64_t kBlockedMinTokens = 8;
// Query tokens per GEMM task.
constexpr int64_t kQueryBlock = 32;
// The per-token schedule's P.V with OpKernels::pv_lanes_f16: columns per slice and
// query heads per pass (their lane partials, 4 x 64 x 16 floats, 16 KiB).
constexpr int kSliceCols = 16;
constexpr int kSliceHeads = 4;

// The sum of e^(s - max) over a row of scores as llama.cpp's softmax forms it (the
// exponentials come from OpKernels::exp_row, exp_fma): chunks of 16 consecutive key
// positions (positions not in the row count as 0) summed as lanes16, the chunk sums
// added in double. e[j] belongs to key position index[j] (increasing).
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

// x[i] rounded to F16 and back, for i < n, with the level's conversions (they round as
// fp32_to_fp16 does; F16C at AVX2: the software conversion was about a sixth of a decode
// step's attention at 512 cells).
void round_to_f16(const OpKernels& kernels, float* x, int64_t n, std::vector<uint16_t>& halves) {
  if (int64_t(halves.size()) < n) halves.resize(size_t(n));
  kernels.to_f16(x, halves.data(), n);
  kernels.f16_to_f32(halves.data(), x, int(n));
}

// The per-token schedule for the tokens in `tokens`. lanes16: the batch has more
// than one token (llama.cpp's GEMM order), else lanes64 (its vector-dot order).
void attend_per_token(OpContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                      const backend::AttentionParams& p, const AttentionTables& tab, const std::vector<int64_t>& tokens,
                      bool lanes16, const Tensor& out) {
  const int group = p.n_head / p.n_head_kv;
  const bool f16 = k_cache.type == backend::DType::f16;
  const OpKernels& kernels = op_kernels(ctx.isa);
  const int hd = p.head_dim;
  const bool qk16 = lanes16 && hd % 16 == 0;
  const int pv_lanes = lanes16 ? 16 : 64;
  const std::byte* k_base = k_cache.row_ptr(0);
  const std::byte* v_base = v_cache.row_ptr(0);
  const std::byte* q_base = q.row_ptr(0);
  std::byte* out_base = out.row_ptr(0);

  TokenScores token_scores(p, tab.token_seq, tab.seq_cells, tokens);  // score_acc partials
  // Items: (token, kv head, part of the group's query heads). With fewer (token, kv head)
  // pairs than threads (decode with one kv head, as Gemma 3 has) the group's heads are
  // cut into parts so that every thread works; each head's sums are the same whichever
  // part computes them. Not with score_acc: its partial row sums over the whole group.
  const int64_t pairs = int64_t(tokens.size()) * p.n_head_kv;
  const int parts = token_scores.row(0) != nullptr || pairs >= ctx.pool.size()
                        ? 1
                        : int(std::min<int64_t>(group, (ctx.pool.size() + pairs - 1) / pairs));
  const int part_heads = (group + parts - 1) / parts;
  const int64_t n_items = pairs * parts;
  ctx.pool.parallel_for(n_items, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> slots, cells, kv_pos;  // of the visible cells, by increasing position
    std::vector<std::pair<int32_t, int32_t>> by_pos;  // (position, cell)
    std::vector<float> scores, queries(size_t(group) * hd), part;
    std::vector<double> tail(static_cast<size_t>(hd));
    std::vector<const uint16_t*> rows_f16;
    std::vector<int32_t> lanes;
    std::vector<uint16_t> halves;
    std::vector<float> key;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t pair = item / parts;
      const int64_t t = tokens[size_t(pair / p.n_head_kv)];
      const int kv_head = int(pair % p.n_head_kv);
      // This item's query heads of the group: [h0, h0 + gh).
      const int h0 = int(item % parts) * part_heads, gh = std::min(group, h0 + part_heads) - h0;
      if (gh <= 0) continue;
      const int32_t pos = tab.token_pos[t];
      const int32_t seq = tab.token_seq[t];
      // The sums follow the key positions (llama.cpp's cell index for one sequence),
      // so that they do not depend on where the cache placed a position.
      by_pos.clear();
      for (int32_t c = 0; c < tab.seq_cells[seq]; ++c)
        if (visible(pos, tab.pos_of(seq, c), p.window, p.exclude_recent)) by_pos.emplace_back(tab.pos_of(seq, c), c);
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
      // Queries of the group, rounded to F16 for an F16 cache (llama.cpp converts them;
      // the level's conversions round as fp32_to_fp16 does).
      std::copy(q_row + int64_t(kv_head * group + h0) * hd, q_row + int64_t(kv_head * group + h0 + gh) * hd,
                queries.begin());
      if (f16) round_to_f16(kernels, queries.data(), gh * hd, halves);
      scores.resize(size_t(gh * n));
      // Scores for the whole group, one key row at a time.
      // (An F16 key row is widened once for the whole group: the f32 dot products of the
      // widened row are the F16 ones' bits.)
      const bool widen = f16 && group > 1;
      if (widen) key.resize(size_t(hd));
      for (int64_t j = 0; j < n; ++j) {
        const std::byte* k_row = k_base + size_t(slots[size_t(j)]) * k_cache.row_stride;
        if (widen) kernels.f16_to_f32(reinterpret_cast<const uint16_t*>(k_row) + kv_col, key.data(), hd);
        for (int g = 0; g < gh; ++g) {
          const float* qh = queries.data() + size_t(g) * hd;
          float s;
          if (widen) {
            s = qk16 ? kernels.dot16_f32(qh, key.data(), hd) : kernels.dot64_f32(qh, key.data(), hd);
          } else if (f16) {
            const auto* kr = reinterpret_cast<const uint16_t*>(k_row) + kv_col;
            s = qk16 ? kernels.dot16_f16(qh, kr, hd) : kernels.dot64_f16(qh, kr, hd);
          } else {
            const auto* kr = reinterpret_cast<const float*>(k_row) + kv_col;
            s = qk16 ? kernels.dot16_f32(qh, kr, hd) : kernels.dot64_f32(qh, kr, hd);
          }
          s *= p.scale;
          if (p.softcap > 0.0f) s = p.softcap * std::tanh(s / p.softcap);
          scores[size_t(g * n + j)] = s;
        }
      }
      // Probabilities (rounded to F16 for an F16 cache, as llama.cpp converts them).
      for (int g = 0; g < gh && n > 0; ++g) {
        float* s = scores.data() + g * n;
        kernels.exp_row(s, n, *std::max_element(s, s + n));
        const auto inv = float(1.0 / softmax_total(s, kv_pos.data(), n));
        for (int64_t j = 0; j < n; ++j) s[j] *= inv;
        if (f16) round_to_f16(kernels, s, n, halves);
      }
      if (float* token_row = token_scores.row(size_t(pair / p.n_head_kv)))  // parts == 1
        add_group_scores(token_row, p.n_head_kv, kv_head, scores.data(), cells.data(), n, group);
      // Keys at positions below `split` go to lane position % pv_lanes; lanes64 adds
      // the keys from split on (llama.cpp's KV length for one sequence, pos + 1
      // padded to 32, rounded down to 64) in double.
      const int64_t n_kv = std::max<int64_t>(32, (int64_t(pos) + 1 + 31) / 32 * 32);
      const int64_t split = lanes16 ? std::numeric_limits<int64_t>::max() : n_kv / 64 * 64;
      const bool any_lanes = n > 0 && kv_pos[0] < split;  // else (short contexts) all in double
      int64_t j = 0;
      while (j < n && kv_pos[size_t(j)] < split) ++j;
      auto* out_row = reinterpret_cast<float*>(out_base + size_t(t) * out.row_stride);
      if (any_lanes && f16 && kernels.pv_lanes_f16 != nullptr && hd % kSliceCols == 0) {
        // The same sums slice by slice of kSliceCols columns, for up to kSliceHeads heads
        // at a time: their lane partials stay in L1 (the whole [group][lanes][hd] array,
        // 256 KiB for Gemma's heads, went to L2 and back for every row).
        rows_f16.resize(size_t(j));
        lanes.resize(size_t(j));
        for (int64_t r = 0; r < j; ++r) {
          rows_f16[size_t(r)] = reinterpret_cast<const uint16_t*>(v_base + size_t(slots[size_t(r)]) * v_cache.row_stride) + kv_col;
          lanes[size_t(r)] = int32_t(kv_pos[size_t(r)] & (pv_lanes - 1));  // positions >= 0
        }
        const int cols = kernels.pv_lanes_cols > 0 && hd % kernels.pv_lanes_cols == 0 ? kernels.pv_lanes_cols : kSliceCols;
        part.resize(size_t(kSliceHeads) * pv_lanes * cols);
        for (int g0 = 0; g0 < gh; g0 += kSliceHeads) {
          const int gn = std::min(kSliceHeads, gh - g0);
          for (int c0 = 0; c0 < hd; c0 += cols) {
            std::fill(part.begin(), part.begin() + int64_t(gn) * pv_lanes * cols, 0.0f);
            kernels.pv_lanes_f16(scores.data() + size_t(g0) * n, int(n), gn, rows_f16.data(), lanes.data(), int(j), c0,
                                 cols, pv_lanes, part.data());
            for (int g = 0; g < gn; ++g)
              kernels.reduce_lanes(part.data() + size_t(g) * pv_lanes * cols, pv_lanes, cols,
                                   out_row + int64_t(kv_head * group + h0 + g0 + g) * hd + c0);
          }
        }
      } else if (any_lanes) {
        part.assign(size_t(gh) * pv_lanes * hd, 0.0f);
        for (int64_t r = 0; r < j; ++r) {
          const std::byte* v_row = v_base + size_t(slots[size_t(r)]) * v_cache.row_stride;
          const int lane = int(kv_pos[size_t(r)] % pv_lanes);
          for (int g = 0; g < gh; ++g) {
            float* a = part.data() + (size_t(g) * pv_lanes + size_t(lane)) * hd;
            const float w = scores[size_t(g * n + r)];
            if (f16) {
              kernels.axpy_f16(a, w, reinterpret_cast<const uint16_t*>(v_row) + kv_col, hd);
            } else {
              kernels.axpy_f32(a, w, reinterpret_cast<const float*>(v_row) + kv_col, hd);
            }
          }
        }
        for (int g = 0; g < gh; ++g)
          kernels.reduce_lanes(part.data() + size_t(g) * pv_lanes * hd, pv_lanes, hd,
                               out_row + int64_t(kv_head * group + h0 + g) * hd);
      }
      for (int g = 0; g < gh; ++g) {
        float* oh = out_row + int64_t(kv_head * group + h0 + g) * hd;
        if (!any_lanes) std::fill(oh, oh + hd, 0.0f);
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
  const OpKernels& kernels = op_kernels(ctx.isa);
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
      std::vector<float> value(static_cast<size_t>(hd));
      for (int64_t c = begin; c < end; ++c) {
        float* key = keys.data() + c * hd;
        if (cell_pos[size_t(c)] < 0) {
          std::fill(key, key + hd, 0.0f);
          for (int d = 0; d < hd; ++d) values_t[size_t(d * n_pad + c)] = 0.0f;
          continue;
        }
        const int64_t slot = tab.slot_of(seq, int32_t(c));
        if (f16) {  // the level's exact conversions
          kernels.f16_to_f32(k_cache.row_ptr<uint16_t>(slot) + kv_col, key, hd);
          kernels.f16_to_f32(v_cache.row_ptr<uint16_t>(slot) + kv_col, value.data(), hd);
        } else {
          std::copy_n(k_cache.row_ptr<float>(slot) + kv_col, hd, key);
          std::copy_n(v_cache.row_ptr<float>(slot) + kv_col, hd, value.data());
        }
        for (int d = 0; d < hd; ++d) values_t[size_t(d * n_pad + c)] = value[size_t(d)];
      }
    });
    // Threads take blocks from a shared counter, the last (which see the most cells under
    // a causal mask) first: halves in order gave one thread 3/4 of a prompt's work.
    std::atomic<int64_t> taken{0};
    ctx.pool.run([&](int, int) {
      std::vector<float> queries, scores, result;
      std::vector<uint16_t> halves;
      for (int64_t i = taken.fetch_add(1, std::memory_order_relaxed); i < n_blocks;
           i = taken.fetch_add(1, std::memory_order_relaxed)) {
        const int64_t blk = n_blocks - 1 - i;
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
          std::copy(src, src + int64_t(group) * hd, dst);
        }
        if (f16) round_to_f16(kernels, queries.data(), rows * hd, halves);
        // Only cells some query of the block can see take part, in whole chunks of 16
        // (the rest would get probability 0: leaving them out changes no sum).
        int64_t lo = n_pad, hi = 0;
        for (int64_t c = 0; c < n_cells; ++c)
          if (visible(max_pos, cell_pos[size_t(c)], 0, p.exclude_recent) &&
              (p.window <= 0 || min_pos - cell_pos[size_t(c)] < p.window)) {
            lo = std::min(lo, c);
            hi = c + 1;
          }
        result.assign(size_t(rows * hd), 0.0f);
        if (hi > lo) {
          lo = lo / 16 * 16;
          hi = (hi + 15) / 16 * 16;
          const int64_t cols = hi - lo;
          scores.resize(size_t(rows * cols));
          kernels.gemm16(int(rows), int(cols), hd, queries.data(), hd, keys.data() + lo * hd, hd, scores.data(),
                         int(cols));
          for (int64_t r = 0; r < rows; ++r) {
            const int32_t pos = tab.token_pos[tokens[size_t(t0 + r / group)]];
            float* s = scores.data() + r * cols;
            float max_score = -std::numeric_limits<float>::infinity();
            for (int64_t j = 0; j < cols; ++j) {
              s[j] *= p.scale;
              if (p.softcap > 0.0f) s[j] = p.softcap * std::tanh(s[j] / p.softcap);
              if (!visible(pos, cell_pos[size_t(lo + j)], p.window, p.exclude_recent)) s[j] = -std::numeric_limits<float>::infinity();
              max_score = std::max(max_score, s[j]);
            }
            if (max_score == -std::numeric_limits<float>::infinity()) {
              std::fill(s, s + cols, 0.0f);  // nothing visible: zeros, as the contract says
              continue;
            }
            kernels.exp_row(s, cols, max_score);
            double total = 0.0;
            for (int64_t c0 = 0; c0 < cols; c0 += 16) total += double(Lanes16Scalar::load(s + c0).sum());
            const auto inv = float(1.0 / total);
            for (int64_t j = 0; j < cols; ++j) s[j] *= inv;
            if (f16) round_to_f16(kernels, s, cols, halves);
          }
          if (float* block_row = block_scores.row(blk)) add_block_scores(block_row + lo, scores.data(), rows, cols);
          kernels.gemm16(int(rows), hd, int(cols), scores.data(), int(cols), values_t.data() + lo, int(n_pad),
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

// Writes p.lse and, with a prior, the attention over the union of the prior's cells and
// this call's: `own_lse` [n_tok][n_head] is this call's normaliser, `out` its output.
void merge_prior(OpContext& ctx, const backend::AttentionParams& p, const std::vector<float>& own_lse,
                 const Tensor& out) {
  const int n_head = p.n_head, hd = p.head_dim;
  const bool merge = p.prior_out.rows > 0;
  ctx.pool.parallel_for(out.rows, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      for (int h = 0; h < n_head; ++h) {
        float lse = own_lse[size_t(t * n_head + h)];
        if (merge) {
          const float prior_lse = p.prior_lse.row_ptr<float>(t)[h];
          const float m = std::max(lse, prior_lse);
          float* o = out.row_ptr<float>(t) + int64_t(h) * hd;
          const float* prior = p.prior_out.row_ptr<float>(t) + int64_t(h) * hd;
          if (m == -std::numeric_limits<float>::infinity()) {
            std::fill(o, o + hd, 0.0f);  // neither call saw a cell: zeros, as the contract says
          } else {
            // The weights from their e^(l - m), so that a -inf side weighs exactly 0.
            const float w_own = std::exp(lse - m), w_prior = std::exp(prior_lse - m);
            const float total = w_own + w_prior;
            const float a = w_own / total, b = w_prior / total;
            for (int d = 0; d < hd; ++d) o[d] = a * o[d] + b * prior[d];
            lse = m + std::log(total);
          }
        }
        if (p.lse.rows > 0) p.lse.row_ptr<float>(t)[h] = lse;
      }
  });
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
  // (attention_flash.cpp); the rest llama.cpp's orders below. An lse output or a prior
  // sends every token to the flash schedules: only they keep each row's max and sum.
  const bool with_lse = p.lse.rows > 0 || p.prior_out.rows > 0;
  const bool quantized = k_cache.type != backend::DType::f16 && k_cache.type != backend::DType::f32;
  std::vector<std::vector<int64_t>> by_seq(size_t(p.page_table.rows)), flash(size_t(p.page_table.rows));
  bool any_flash = false;
  for (int64_t t = 0; t < q.rows; ++t) {
    const int32_t s = tab.token_seq[t];
    const bool long_seq = !ctx.batch_invariant && tab.seq_cells[s] > kFlashMinCells;
    (with_lse || quantized || long_seq ? flash : by_seq)[size_t(s)].push_back(t);
    any_flash = any_flash || with_lse || quantized || long_seq;
  }
  if (with_lse) {
    std::vector<float> own_lse(size_t(q.rows * p.n_head));
    attention_flash(ctx, q, k_cache, v_cache, p, tab, flash, out, own_lse.data());
    return merge_prior(ctx, p, own_lse, out);
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
