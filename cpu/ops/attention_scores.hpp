// Pieces shared by the CPU attention schedules (attention.cpp, attention_flash.cpp):
// the index tables, visibility, and score_acc accumulation (AttentionParams::score_acc,
// for H2O eviction).
//
// Work items run in parallel and several of them may add to the same score_acc entry
// (query tokens of one sequence), so each item writes its own partial row and the
// partials are added into score_acc afterwards, on the calling thread, in a fixed
// order: no data race, and the sums do not depend on thread timing (the eviction
// ranking built on them stays reproducible).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/backend.hpp"

namespace ember::cpu {

// Host views of the attention op's index tensors, read once per op (both schedules
// of attention.cpp and attention_flash.cpp).
struct AttentionTables {
  const int32_t* token_pos;
  const int32_t* token_seq;
  const int32_t* seq_cells;
  const int32_t* cell_pos;
  int64_t cells_per_row;
  const int32_t* page_table;
  int64_t pages_per_row;
  int page_tokens;

  static AttentionTables of(const backend::AttentionParams& p) {
    return {p.token_pos.row_ptr<int32_t>(0), p.token_seq.row_ptr<int32_t>(0), p.seq_cells.row_ptr<int32_t>(0),
            p.cell_pos.row_ptr<int32_t>(0),  p.cell_pos.cols, p.page_table.row_ptr<int32_t>(0),
            p.page_table.cols, p.page_tokens};
  }
  int32_t pos_of(int32_t seq, int32_t cell) const { return cell_pos[seq * cells_per_row + cell]; }
  int64_t slot_of(int32_t seq, int32_t cell) const {
    return int64_t(page_table[seq * pages_per_row + cell / page_tokens]) * page_tokens + cell % page_tokens;
  }
};

// Whether a query at query_pos sees a cell at kv_pos (-1: empty) under `window` (0: none)
// and `exclude_recent` (0: none; else cells less than that many positions back are
// excluded: AttentionParams::exclude_recent).
inline bool visible(int32_t query_pos, int32_t kv_pos, int window, int exclude_recent) {
  return kv_pos >= 0 && kv_pos <= query_pos && (window <= 0 || query_pos - kv_pos < window) &&
         (exclude_recent <= 0 || query_pos - kv_pos >= exclude_recent);
}

// Partials of the per-token schedule: one row [seq_cells(seq of token), n_head_kv] per
// query token, laid out as a score_acc row.
class TokenScores {
 public:
  // Inactive (row() returns nullptr) when `p` has no score_acc.
  TokenScores(const backend::AttentionParams& p, const int32_t* token_seq, const int32_t* seq_cells,
              const std::vector<int64_t>& tokens)
      : p_(p), token_seq_(token_seq), seq_cells_(seq_cells), tokens_(tokens) {
    if (p.score_acc.rows == 0) return;
    int64_t total = 0;
    for (int64_t t : tokens) {
      offset_.push_back(total);
      total += int64_t(seq_cells[token_seq[t]]) * p.n_head_kv;
    }
    values_.assign(size_t(total), 0.0f);
  }
  // The partial row of tokens[i], or nullptr.
  float* row(size_t i) { return offset_.empty() ? nullptr : values_.data() + offset_[i]; }
  // Adds every partial row into score_acc, in token order.
  void merge() const {
    for (size_t i = 0; i < offset_.size(); ++i) {
      const int32_t seq = token_seq_[tokens_[i]];
      float* acc = p_.score_acc.row_ptr<float>(seq);
      const int64_t n = int64_t(seq_cells_[seq]) * p_.n_head_kv;
      for (int64_t x = 0; x < n; ++x) acc[x] += values_[size_t(offset_[i] + x)];
    }
  }

 private:
  const backend::AttentionParams& p_;
  const int32_t* token_seq_;
  const int32_t* seq_cells_;
  const std::vector<int64_t>& tokens_;
  std::vector<int64_t> offset_;
  std::vector<float> values_;
};

// For one (token, kv head) item of the per-token schedule: probs is [group][n] (the
// normalised probabilities of the group's query heads over the n visible cells
// cells[j]); adds their sum over the group into the token's partial row.
template <typename Cell>
void add_group_scores(float* token_row, int n_head_kv, int kv_head, const float* probs, const Cell* cells, int64_t n,
                      int group) {
  for (int64_t j = 0; j < n; ++j) {
    float sum = 0.0f;
    for (int g = 0; g < group; ++g) sum += probs[g * n + j];
    token_row[int64_t(cells[j]) * n_head_kv + kv_head] += sum;
  }
}

// Partials of a blocked (many query tokens of one sequence) schedule for one kv head:
// one row of [n_cells] per block of query tokens, indexed by cell.
class BlockScores {
 public:
  // Inactive (row() returns nullptr) when `p` has no score_acc.
  BlockScores(const backend::AttentionParams& p, int64_t n_blocks, int64_t n_cells)
      : p_(p), n_cells_(n_cells), values_(p.score_acc.rows > 0 ? size_t(n_blocks * n_cells) : 0, 0.0f) {}
  // The partial row of block `blk`, or nullptr.
  float* row(int64_t blk) { return values_.empty() ? nullptr : values_.data() + blk * n_cells_; }
  // Adds cells [0, cells_used) of the partial rows into score_acc row `seq` for `kv_head`,
  // in block order, and clears the rows for the next kv head.
  void merge(int32_t seq, int kv_head, int64_t cells_used) {
    if (values_.empty()) return;
    float* acc = p_.score_acc.row_ptr<float>(seq);
    const int64_t n_blocks = int64_t(values_.size()) / std::max<int64_t>(n_cells_, 1);
    for (int64_t c = 0; c < std::min(cells_used, n_cells_); ++c) {
      float sum = 0.0f;
      for (int64_t b = 0; b < n_blocks; ++b) sum += values_[size_t(b * n_cells_ + c)];
      acc[c * p_.n_head_kv + kv_head] += sum;
    }
    std::fill(values_.begin(), values_.end(), 0.0f);
  }

 private:
  const backend::AttentionParams& p_;
  int64_t n_cells_;
  std::vector<float> values_;
};

// Adds the probabilities of `rows` score rows (each `cols` wide, row-major) into a
// block's partial row: block_row[j] += sum over rows of probs[r][j].
inline void add_block_scores(float* block_row, const float* probs, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) block_row[j] += probs[r * cols + j];
}

}  // namespace ember::cpu
