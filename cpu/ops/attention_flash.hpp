// Flash-style attention on the CPU (attention_flash.cpp): tiles of keys with an online
// softmax for blocks of query tokens, split-K over the cells for lone query tokens.
// attention() (attention.cpp) validates the index tables and chooses the sequences
// that take it.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/ops/attention_scores.hpp"
#include "cpu/ops/ops.hpp"

namespace ember::cpu {

// Attention for the query tokens by_seq[s] of each sequence row s (any cache type).
// When `lse` is not null (not with score_acc) it also receives, at [t * n_head + head],
// the log of the softmax normaliser of query token t and head over the cells it saw
// (-inf for none): lse has q.rows * n_head floats.
void attention_flash(OpContext& ctx, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const backend::AttentionParams& p, const AttentionTables& tab,
                     const std::vector<std::vector<int64_t>>& by_seq, const Tensor& out, float* lse = nullptr);

}  // namespace ember::cpu
