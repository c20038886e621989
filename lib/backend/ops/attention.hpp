// attention: scaled dot-product attention of new query tokens over the paged KV cache
// (Vaswani et al. 2017), with grouped-query heads (Ainslie et al. 2023) and an
// optional sliding window (Beltagy et al. 2020).
//
//   q:       [n_tok, n_head * head_dim] f32 (already roped)
//   k_cache: [n_slots, n_head_kv * head_dim] F32, F16 or a KV storage type (keys already
//            roped; see quant/kv_formats.hpp), read in place: quantized rows are decoded
//            a row or a tile at a time, never into a full-size copy
//   v_cache: like k_cache, same type
//   out:     [n_tok, n_head * head_dim] f32
// Query token t of sequence row s = token_seq[t] at position p_t attends to the
// cells c in [0, seq_cells[s]) of that sequence; cell c lives in slot
//   page_table[s][c / page_tokens] * page_tokens + c % page_tokens
// whose position p = cell_pos[s][c] is used when p >= 0, p <= p_t,
// (window == 0 or p_t - p < window) and (exclude_recent == 0 or p_t - p >= exclude_recent).
// Scores are scale * q.k (softcapped when softcap > 0), normalised with a max-subtracted
// softmax; the output is the weighted sum of value rows. A token with no visible cell gets zeros. When score_acc
// has rows, the normalised probabilities are also added into it (see AttentionParams).
//
// Attention over two disjoint sets of cells (two caches) in two calls: when lse has rows
// the op writes, per token and query head, the natural log of the softmax's normaliser
// sum_j e^(score_j) over the cells it saw (-inf for none); a later call given those as
// prior_lse and its output as prior_out returns the attention over the union (the
// Flash-Decoding merge, Dao et al. 2023), and its lse is the union's. A token that sees
// no cell in this call gets prior_out, one with no prior cell (prior_lse -inf) its own
// output, one with neither zeros. lse, prior_out and prior_lse must not overlap out (out
// is written while prior_out is read). Neither is combined with score_acc.
//
// exclude_recent = R > 0 (default 0, valid >= 0) serves a cache that keeps its newest R
// tokens a second time at full precision: a call over the (quantized) cache with
// exclude_recent = R and lse out, then one over the full-precision cache with window = R
// (min(R, W) under a window W) and that result as prior, see disjoint cells per query
// whose union is the causal (windowed) set, so the merge is the attention over all of
// them. A token all of whose cells are excluded sees none (zeros, lse -inf).
#pragma once

#include "backend/ops/check.hpp"
#include "quant/kv_formats.hpp"

namespace ember::ops {

inline void attention(backend::Backend& be, const backend::Tensor& q, const backend::Tensor& k_cache,
                      const backend::Tensor& v_cache, const backend::AttentionParams& p,
                      const backend::Tensor& out) {
  using namespace detail;
  const char* op = "attention";
  expect_type(op, "q", q, DType::f32);
  expect_type(op, "out", out, DType::f32);
  if (p.n_head <= 0 || p.n_head_kv <= 0 || p.head_dim <= 0 || p.n_head % p.n_head_kv != 0)
    fail(ErrorCode::invalid_argument, "attention: {} query heads cannot share {} kv heads", p.n_head, p.n_head_kv);
  if (p.page_tokens <= 0) fail(ErrorCode::invalid_argument, "attention: page_tokens must be > 0");
  if (p.exclude_recent < 0)
    fail(ErrorCode::invalid_argument, "attention: exclude_recent is {}, must be >= 0", p.exclude_recent);
  expect_shape(op, "q", q, q.rows, int64_t(p.n_head) * p.head_dim);
  expect_shape(op, "out", out, q.rows, q.cols);
  expect_shape(op, "k_cache", k_cache, k_cache.rows, int64_t(p.n_head_kv) * p.head_dim);
  expect_shape(op, "v_cache", v_cache, k_cache.rows, k_cache.cols);
  // Keys and values share a type, or are both quantized (k8v4: int8 keys, int4 values).
  const bool both_quantized = quant::kv::is_quantized(k_cache.type) && quant::kv::is_quantized(v_cache.type);
  if (!quant::is_kv_storage_type(k_cache.type) || !quant::is_kv_storage_type(v_cache.type) ||
      (k_cache.type != v_cache.type && !both_quantized))
    fail(ErrorCode::unsupported, "attention: cache types {}/{} are not supported", quant::type_name(k_cache.type),
         quant::type_name(v_cache.type));
  for (const DType t : {k_cache.type, v_cache.type})
    if (const int group = quant::kv::group_size(t); group != 0 && p.head_dim % group != 0)
      fail(ErrorCode::invalid_argument, "attention: head_dim {} is not a multiple of the {} group size {}", p.head_dim,
           quant::type_name(t), group);
  if (k_cache.rows % p.page_tokens != 0)
    fail(ErrorCode::invalid_argument, "attention: {} cache slots are not whole pages of {}", k_cache.rows,
         p.page_tokens);
  expect_type(op, "token_pos", p.token_pos, DType::i32);
  expect_type(op, "token_seq", p.token_seq, DType::i32);
  expect_type(op, "page_table", p.page_table, DType::i32);
  expect_type(op, "seq_cells", p.seq_cells, DType::i32);
  expect_type(op, "cell_pos", p.cell_pos, DType::i32);
  expect_shape(op, "token_pos", p.token_pos, q.rows, 1);
  expect_shape(op, "token_seq", p.token_seq, q.rows, 1);
  expect_shape(op, "seq_cells", p.seq_cells, p.page_table.rows, 1);
  if (p.cell_pos.rows != p.page_table.rows || p.cell_pos.cols < 1)
    fail(ErrorCode::invalid_argument, "attention: cell_pos is [{}, {}], expected [{}, >= 1]", p.cell_pos.rows,
         p.cell_pos.cols, p.page_table.rows);
  if (p.score_acc.rows > 0) {
    expect_type(op, "score_acc", p.score_acc, DType::f32);
    expect_shape(op, "score_acc", p.score_acc, p.page_table.rows, p.cell_pos.cols * p.n_head_kv);
  }
  if (p.score_acc.rows > 0 && (p.lse.rows > 0 || p.prior_out.rows > 0))
    fail(ErrorCode::invalid_argument, "attention: score_acc is not combined with lse or prior_out");
  if (p.lse.rows > 0) {
    expect_type(op, "lse", p.lse, DType::f32);
    expect_shape(op, "lse", p.lse, q.rows, p.n_head);
    expect_apart(op, "lse", p.lse, out);
  }
  if (p.prior_out.rows > 0) {
    expect_type(op, "prior_out", p.prior_out, DType::f32);
    expect_shape(op, "prior_out", p.prior_out, q.rows, q.cols);
    expect_type(op, "prior_lse", p.prior_lse, DType::f32);
    expect_shape(op, "prior_lse", p.prior_lse, q.rows, p.n_head);
    expect_apart(op, "prior_out", p.prior_out, out);
    expect_apart(op, "prior_lse", p.prior_lse, out);
  } else if (p.prior_lse.rows > 0) {
    fail(ErrorCode::invalid_argument, "attention: prior_lse is given without prior_out");
  }
  be.attention(q, k_cache, v_cache, p, out);
}

}  // namespace ember::ops
