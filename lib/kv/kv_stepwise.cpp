// Stepwise steps: a speculative verification under eviction places its tokens one at a
// time, and a cut into the step replays the kept ones (see kv_cache.hpp).
#include <algorithm>
#include <set>

#include "backend/ops/kv_store.hpp"
#include "common/fail.hpp"
#include "kv/kv_cache.hpp"

namespace ember::kv {

// One token in one layer, as a one-token place() makes room for it and appends it.
int32_t KVCache::place_one(Sequence& s, const SeqPolicy& p, int layer, int32_t pos) {
  Layer& l = s.layers[size_t(layer)];
  free_window(l, config_.layer_window.empty() ? 0 : config_.layer_window[size_t(layer)], pos);
  evict(s, p, layer, 1);
  return append_cell(l, pos);
}

Placement KVCache::place_stepwise(int32_t seq, int32_t first_pos, int32_t n) {
  require(seq >= 0 && first_pos >= 0 && n >= 1, "place_stepwise: bad step (sequence {}, position {}, {} tokens)", seq,
          first_pos, n);
  if (exact_) fail(ErrorCode::unsupported, "place_stepwise: a cache with an exact window places whole steps only");
  auto it = sequences_.find(seq);
  require(it != sequences_.end() && it->second.next_idx == first_pos,
          "place_stepwise: sequence {} does not end just before position {}", seq, first_pos);
  drop_snapshot(seq);  // a new step of a sequence ends its previous one
  // Room for the whole step in the pool, with two pages per layer of copy-on-write slack
  // (sink rows and compaction rewrite rows in place while the snapshot holds them).
  const int64_t pages = pages_needed(seq, n) + 2 * int64_t(config_.n_layer);
  if (pages > pool_->stats().pages_free)
    fail(ErrorCode::cache_full, "KV cache full: the step needs up to {} more pages of {} tokens, {} are free", pages,
         page_tokens(), pool_->stats().pages_free);
  Sequence& s = it->second;
  take_snapshot(seq, s);
  StepLog log;
  log.first = first_pos;
  log.n = n;
  log.k.resize(size_t(config_.n_layer));
  log.v.resize(size_t(config_.n_layer));
  log.score.resize(size_t(config_.n_layer));
  step_logs_[seq] = std::move(log);
  s.next_idx = first_pos + n;
  Placement placement;
  placement.slots.assign(size_t(config_.n_layer), std::vector<int32_t>(size_t(n), -1));
  placement.first_idx.emplace_back(seq, first_pos);
  placement.stepwise.push_back(seq);
  return placement;
}

int32_t KVCache::place_token(int32_t seq, int layer, int32_t token) {
  auto log = step_logs_.find(seq);
  require(log != step_logs_.end() && token >= 0 && token < log->second.n && layer >= 0 && layer < config_.n_layer,
          "place_token: no such token in an open stepwise step of sequence {}", seq);
  return place_one(sequences_.at(seq), policy(seq), layer, log->second.first + token);
}

void KVCache::log_step_rows(int32_t seq, int layer, int32_t token, int32_t count, std::span<const float> k,
                            std::span<const float> v) {
  StepLog& log = step_logs_.at(seq);
  const PoolConfig& pc = pool_->config();
  auto& lk = log.k[size_t(layer)];
  auto& lv = log.v[size_t(layer)];
  lk.resize(size_t(log.n) * size_t(pc.k_width));
  lv.resize(size_t(log.n) * size_t(pc.v_width));
  std::copy(k.begin(), k.begin() + long(count * pc.k_width), lk.begin() + long(token * pc.k_width));
  std::copy(v.begin(), v.begin() + long(count * pc.v_width), lv.begin() + long(token * pc.v_width));
}

void KVCache::add_token_scores(int32_t seq, int layer, int32_t token, int n_head_kv, std::span<const float> scores) {
  StepLog& log = step_logs_.at(seq);
  Layer& l = sequences_.at(seq).layers[size_t(layer)];
  for (size_t c = 0; c < l.score.size(); ++c)
    for (int h = 0; h < n_head_kv; ++h) l.score[c] += scores[c * size_t(n_head_kv) + size_t(h)];
  auto& rows = log.score[size_t(layer)];
  rows.resize(size_t(log.n));
  rows[size_t(token)].assign(scores.begin(), scores.begin() + long(l.score.size() * size_t(n_head_kv)));
}

// Restores the state before the last (stepwise) step and places its first n_keep
// tokens again, as the step did: the same evictions, sink moves, rows and scores.
void KVCache::replay_step(int32_t seq, int32_t n_keep) {
  const StepLog log = std::move(step_logs_.at(seq));
  restore_snapshot(seq, log.first);
  Sequence& s = sequences_.at(seq);
  const SeqPolicy p = policy(seq);
  const PoolConfig& pc = pool_->config();
  const size_t rows_at = 64;
  auto buffer = be_.allocate(rows_at + size_t(pc.k_width + pc.v_width) * sizeof(float));
  const backend::Tensor t_slot = backend::make_tensor(*buffer, 0, quant::DType::i32, 1, 1);
  const backend::Tensor t_k = backend::make_tensor(*buffer, rows_at, quant::DType::f32, 1, pc.k_width);
  const backend::Tensor t_v =
      backend::make_tensor(*buffer, rows_at + size_t(pc.k_width) * sizeof(float), quant::DType::f32, 1, pc.v_width);
  std::set<std::pair<int, int32_t>> moved;  // (layer, token index) of sinks that moved
  for (const auto& [layer, cell] : s.moved) moved.emplace(layer, s.layers[size_t(layer)].idx[size_t(cell)]);
  s.moved.clear();
  for (int layer = 0; layer < config_.n_layer; ++layer) {
    const auto& scores = log.score[size_t(layer)];
    for (int32_t t = 0; t < n_keep; ++t) {
      const int32_t slot_id = place_one(s, p, layer, log.first + t);
      Layer& l = s.layers[size_t(layer)];
      for (const auto& [ml, cell] : s.moved) moved.emplace(ml, s.layers[size_t(ml)].idx[size_t(cell)]);
      s.moved.clear();
      be_.upload(t_slot, &slot_id);
      be_.upload(t_k, log.k[size_t(layer)].data() + size_t(t) * size_t(pc.k_width));
      be_.upload(t_v, log.v[size_t(layer)].data() + size_t(t) * size_t(pc.v_width));
      ops::kv_store(be_, t_k, pool_->k(), t_slot);
      ops::kv_store(be_, t_v, pool_->v(), t_slot);
      if (size_t(t) < scores.size() && !scores[size_t(t)].empty()) {
        const std::vector<float>& row = scores[size_t(t)];
        const size_t per_cell = row.size() / std::max<size_t>(l.score.size(), 1);
        for (size_t c = 0; c < l.score.size(); ++c)
          for (size_t h = 0; h < per_cell; ++h) l.score[c] += row[c * per_cell + h];
      }
    }
  }
  be_.synchronize();
  // Sinks whose rows the caller rewrites (their cells as they are now).
  for (const auto& [layer, idx] : moved) {
    const Layer& l = s.layers[size_t(layer)];
    for (size_t c = 0; c < l.pos.size(); ++c)
      if (l.pos[c] >= 0 && l.idx[c] == idx) {
        s.moved.emplace_back(layer, int32_t(c));
        break;
      }
  }
  s.next_idx = log.first + n_keep;
}

}  // namespace ember::kv
