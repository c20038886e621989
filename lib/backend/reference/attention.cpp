#include <cmath>
#include <limits>
#include <vector>

#include "backend/reference/ops.hpp"
#include "common/fail.hpp"
#include "common/fp16.hpp"

namespace ember::reference {
namespace {

float load(const Tensor& cache, int64_t slot, int64_t col) {
  if (cache.type == backend::DType::f32) return cache.row_ptr<float>(slot)[col];
  return fp16_to_fp32(cache.row_ptr<uint16_t>(slot)[col]);
}

}  // namespace

void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const backend::AttentionParams& p,
               const Tensor& out) {
  const int group = p.n_head / p.n_head_kv;
  std::vector<int64_t> slots;
  std::vector<double> scores;
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

    // The cache slots this token may see.
    slots.clear();
    for (int32_t c = 0; c < n_cells; ++c) {
      const int64_t slot = int64_t(pages[c / p.page_tokens]) * p.page_tokens + c % p.page_tokens;
      if (slot < 0 || slot >= k_cache.rows)
        fail(ErrorCode::invalid_argument, "attention: cell {} maps to slot {} outside the cache", c, slot);
      const int32_t kv_pos = *p.slot_pos.row_ptr<int32_t>(slot);
      if (kv_pos < 0 || kv_pos > pos) continue;
      if (p.window > 0 && pos - kv_pos >= p.window) continue;
      slots.push_back(slot);
    }

    for (int h = 0; h < p.n_head; ++h) {
      const float* qh = q.row_ptr<float>(t) + int64_t(h) * p.head_dim;
      const int64_t kv_col = int64_t(h / group) * p.head_dim;
      float* oh = out.row_ptr<float>(t) + int64_t(h) * p.head_dim;
      if (slots.empty()) {
        for (int d = 0; d < p.head_dim; ++d) oh[d] = 0.0f;
        continue;
      }
      scores.assign(slots.size(), 0.0);
      double max_score = -std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < slots.size(); ++j) {
        double dot = 0.0;
        for (int d = 0; d < p.head_dim; ++d) dot += double(qh[d]) * load(k_cache, slots[j], kv_col + d);
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
        for (size_t j = 0; j < slots.size(); ++j) acc += scores[j] * load(v_cache, slots[j], kv_col + d);
        oh[d] = float(acc / total);
      }
    }
  }
}

}  // namespace ember::reference
