#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/reference/ops.hpp"
#include "common/fail.hpp"
#include "quant/quant.hpp"

namespace ember::reference {
namespace {

// Cache rows `slots` decoded to f32 with the type's reference decoder: [slots.size(), cache.cols].
std::vector<float> decode_rows(const Tensor& cache, const std::vector<int64_t>& slots) {
  std::vector<float> rows(slots.size() * size_t(cache.cols));
  for (size_t j = 0; j < slots.size(); ++j)
    quant::dequantize_row(cache.type, cache.row_ptr(slots[j]), rows.data() + j * size_t(cache.cols), cache.cols);
  return rows;
}

}  // namespace

void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const backend::AttentionParams& p,
               const Tensor& out) {
  const int group = p.n_head / p.n_head_kv;
  const bool want_scores = p.score_acc.rows > 0;
  // Probabilities added to score_acc, summed in double and added once at the end.
  std::vector<double> score_sum(want_scores ? size_t(p.score_acc.rows * p.score_acc.cols) : 0, 0.0);
  std::vector<int64_t> slots;
  std::vector<int32_t> cells;
  std::vector<double> scores;
  std::vector<double> own(size_t(p.head_dim));  // this call's normalised output of one head
  const bool want_lse = p.lse.rows > 0, merge = p.prior_out.rows > 0;
  // Writes head h of token t from `own` and its normaliser's log, merged with the prior.
  const auto finish = [&](int64_t t, int h, double own_lse, float* oh) {
    const double inf = std::numeric_limits<double>::infinity();
    double lse = own_lse, w_own = own_lse == -inf ? 0.0 : 1.0, w_prior = 0.0;
    const float* prior = merge ? p.prior_out.row_ptr<float>(t) + int64_t(h) * p.head_dim : nullptr;
    if (merge) {
      const double prior_lse = p.prior_lse.row_ptr<float>(t)[h];
      const double m = std::max(own_lse, prior_lse);
      if (m != -inf) {
        w_own = std::exp(own_lse - m), w_prior = std::exp(prior_lse - m);
        lse = m + std::log(w_own + w_prior);
        w_own /= w_own + w_prior, w_prior = 1.0 - w_own;
      }
    }
    for (int d = 0; d < p.head_dim; ++d)
      oh[d] = float(w_own * own[size_t(d)] + (w_prior > 0.0 ? w_prior * prior[d] : 0.0));
    if (want_lse) p.lse.row_ptr<float>(t)[h] = float(lse);
  };
  for (int64_t t = 0; t < q.rows; ++t) {
    const int32_t pos = *p.token_pos.row_ptr<int32_t>(t);
    const int32_t seq = *p.token_seq.row_ptr<int32_t>(t);
    if (seq < 0 || seq >= p.page_table.rows)
      fail(ErrorCode::invalid_argument, "attention: token {} has sequence row {} outside [0, {})", t, seq,
           p.page_table.rows);
    const int32_t n_cells = *p.seq_cells.row_ptr<int32_t>(seq);
    if (n_cells < 0 || n_cells > p.page_table.cols * p.page_tokens)
      fail(ErrorCode::invalid_argument, "attention: sequence row {} has {} cells, more than its page table holds",
           seq, n_cells);
    const int32_t* pages = p.page_table.row_ptr<int32_t>(seq);

    // The cache slots this token may see, and their cells.
    slots.clear();
    cells.clear();
    for (int32_t c = 0; c < n_cells; ++c) {
      const int64_t slot = int64_t(pages[c / p.page_tokens]) * p.page_tokens + c % p.page_tokens;
      if (slot < 0 || slot >= k_cache.rows)
        fail(ErrorCode::invalid_argument, "attention: cell {} maps to slot {} outside the cache", c, slot);
      if (c >= p.cell_pos.cols)
        fail(ErrorCode::invalid_argument, "attention: cell {} of sequence row {} has no cell_pos column", c, seq);
      const int32_t kv_pos = p.cell_pos.row_ptr<int32_t>(seq)[c];
      if (kv_pos < 0 || kv_pos > pos) continue;
      if (p.window > 0 && pos - kv_pos >= p.window) continue;
      if (p.exclude_recent > 0 && pos - kv_pos < p.exclude_recent) continue;
      slots.push_back(slot);
      cells.push_back(c);
    }
    const std::vector<float> keys = decode_rows(k_cache, slots), values = decode_rows(v_cache, slots);
    const auto width = size_t(k_cache.cols);

    for (int h = 0; h < p.n_head; ++h) {
      const float* qh = q.row_ptr<float>(t) + int64_t(h) * p.head_dim;
      const int kv_head = h / group;
      const size_t kv_col = size_t(kv_head) * size_t(p.head_dim);
      float* oh = out.row_ptr<float>(t) + int64_t(h) * p.head_dim;
      own.assign(size_t(p.head_dim), 0.0);
      if (slots.empty()) {
        finish(t, h, -std::numeric_limits<double>::infinity(), oh);
        continue;
      }
      scores.assign(slots.size(), 0.0);
      double max_score = -std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < slots.size(); ++j) {
        double dot = 0.0;
        for (int d = 0; d < p.head_dim; ++d) dot += double(qh[d]) * keys[j * width + kv_col + size_t(d)];
        double s = dot * p.scale;
        if (p.softcap > 0.0f) s = p.softcap * std::tanh(s / p.softcap);
        scores[j] = s;
        if (s > max_score) max_score = s;
      }
      double total = 0.0;
      for (double& s : scores) {
        s = std::exp(s - max_score);
        total += s;
      }
      for (int d = 0; d < p.head_dim; ++d) {
        double acc = 0.0;
        for (size_t j = 0; j < slots.size(); ++j) acc += scores[j] * values[j * width + kv_col + size_t(d)];
        own[size_t(d)] = acc / total;
      }
      finish(t, h, max_score + std::log(total), oh);
      if (want_scores)
        for (size_t j = 0; j < slots.size(); ++j)
          score_sum[size_t(seq * p.score_acc.cols) + size_t(cells[j]) * size_t(p.n_head_kv) + size_t(kv_head)] +=
              scores[j] / total;
    }
  }
  for (int64_t s = 0; s < p.score_acc.rows; ++s) {
    float* row = p.score_acc.row_ptr<float>(s);
    for (int64_t i = 0; i < p.score_acc.cols; ++i)
      row[i] = float(double(row[i]) + score_sum[size_t(s * p.score_acc.cols + i)]);
  }
}

}  // namespace ember::reference
