// The exact window of the newest tokens (CacheConfig::exact_recent; see kv_cache.hpp):
// its companion cache, what a rewind or a state without it refills, and its checks.
#include <algorithm>

#include "backend/ops/kv_store.hpp"
#include "common/fail.hpp"
#include "kv/kv_cache.hpp"

namespace ember::kv {

KVCache::KVCache(std::shared_ptr<Pool> pool, backend::Backend& backend, const CacheConfig& config,
                 std::shared_ptr<Pool> exact_pool)
    : pool_(std::move(pool)), be_(backend), config_(config) {
  validate_config();
  if (config_.exact_recent <= 0) return;
  require(exact_pool != nullptr, "KV cache: an exact window of {} tokens needs a full-precision page pool",
          config_.exact_recent);
  const PoolConfig& a = pool_->config();
  const PoolConfig& b = exact_pool->config();
  require((b.storage == quant::DType::f16 || b.storage == quant::DType::f32) && b.value_storage() == b.storage,
          "KV cache: the exact window's pool must hold F16 or F32 rows");
  require(b.k_width == a.k_width && b.v_width == a.v_width && b.page_tokens == a.page_tokens,
          "KV cache: the exact window's pool has rows {}/{} in pages of {}, this cache {}/{} in pages of {}", b.k_width,
          b.v_width, b.page_tokens, a.k_width, a.v_width, a.page_tokens);
  CacheConfig c;
  c.n_layer = config_.n_layer;
  // A page more than the window needs: a rewind of up to a page (rejected drafts, a
  // cancelled token) still finds every row the next query reads exact.
  c.layer_window.assign(size_t(c.n_layer), config_.exact_recent + a.page_tokens);
  c.max_seq_tokens = 1 << 24;  // bounded by the window (and a step's tokens), never by a budget
  exact_ = std::make_unique<KVCache>(std::move(exact_pool), backend, c);
}

bool KVCache::exact_holds(int32_t seq, int32_t n) const {
  if (!exact_) return true;
  const int32_t from = std::max(0, n - (config_.exact_recent - 1));
  if (from >= n) return true;
  auto e = exact_->sequences_.find(seq);
  if (e == exact_->sequences_.end()) return false;
  for (const Layer& l : e->second.layers) {
    int32_t first = INT32_MAX;
    for (const int32_t p : l.pos)
      if (p >= 0) first = std::min(first, p);
    if (first > from) return false;
  }
  return e->second.next_idx >= n;
}

void KVCache::refill_exact(int32_t seq) {
  if (!exact_) return;
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    exact_->remove(seq);
    return;
  }
  const Sequence& s = it->second;
  const int32_t from = std::max(0, s.next_idx - (config_.exact_recent - 1));
  // Enough already: every layer of the window holds [from, next_idx).
  if (exact_->next_index(seq) == s.next_idx && exact_holds(seq, s.next_idx)) return;
  exact_->remove(seq);
  if (from == s.next_idx) return;
  std::vector<CellRequest> requests;
  for (int32_t p = from; p < s.next_idx; ++p) requests.push_back({seq, p});
  const Placement placed = exact_->place(requests);
  exact_->commit(placed);
  // The rows come back from this cache, decoded: exact no more, but the window is whole
  // again, and it is exact from the next token on. Rows this cache no longer holds (a
  // sliding window freed them) are zeros: no query within that window can see them.
  const auto n = int64_t(requests.size());
  const PoolConfig& pc = pool_->config();
  const int64_t width = std::max(pc.k_width, pc.v_width);
  const size_t index_bytes = (size_t(2 * n) * sizeof(int32_t) + 63) / 64 * 64;
  std::unique_ptr<backend::Buffer> buf = be_.allocate(index_bytes + size_t(n * width) * sizeof(float));
  const backend::Tensor from_slots = backend::make_tensor(*buf, 0, quant::DType::i32, n, 1);
  const backend::Tensor to_slots = backend::make_tensor(*buf, size_t(n) * sizeof(int32_t), quant::DType::i32, n, 1);
  std::vector<int32_t> src(static_cast<size_t>(n)), dst(static_cast<size_t>(n));
  std::vector<float> zeros;
  for (int layer = 0; layer < config_.n_layer; ++layer) {
    const Layer& l = s.layers[size_t(layer)];
    std::vector<int32_t> held(size_t(n), -1);
    for (size_t c = 0; c < l.pos.size(); ++c)
      if (l.pos[c] >= 0 && l.idx[c] >= from && l.idx[c] < s.next_idx) held[size_t(l.idx[c] - from)] = slot(l, int32_t(c));
    for (const bool keys : {true, false}) {
      const backend::Tensor& cache = keys ? pool_->k() : pool_->v();
      const backend::Tensor& window = keys ? exact_->pool_->k() : exact_->pool_->v();
      const backend::Tensor rows =
          backend::make_tensor(*buf, index_bytes, quant::DType::f32, n, keys ? pc.k_width : pc.v_width);
      int64_t m = 0;
      for (int64_t j = 0; j < n; ++j) {
        if (held[size_t(j)] < 0) continue;
        src[size_t(m)] = held[size_t(j)];
        dst[size_t(m)] = placed.slots[size_t(layer)][size_t(j)];
        ++m;
      }
      if (m > 0) {
        be_.upload(from_slots.slice_rows(0, m), src.data());
        be_.upload(to_slots.slice_rows(0, m), dst.data());
        ops::kv_load(be_, cache, from_slots.slice_rows(0, m), rows.slice_rows(0, m));
        ops::kv_store(be_, rows.slice_rows(0, m), window, to_slots.slice_rows(0, m));
      }
      if (m < n) {
        zeros.assign(size_t((n - m) * rows.cols), 0.0f);
        m = 0;
        for (int64_t j = 0; j < n; ++j)
          if (held[size_t(j)] < 0) dst[size_t(m++)] = placed.slots[size_t(layer)][size_t(j)];
        be_.upload(rows.slice_rows(0, m), zeros.data());
        be_.upload(to_slots.slice_rows(0, m), dst.data());
        ops::kv_store(be_, rows.slice_rows(0, m), window, to_slots.slice_rows(0, m));
      }
    }
  }
}

int32_t KVCache::newest_held(const Layer& l, int32_t next_idx) {
  std::vector<int32_t> held;
  for (const int32_t p : l.pos)
    if (p >= 0) held.push_back(p);
  std::sort(held.begin(), held.end());
  for (size_t i = 0; i < held.size(); ++i)
    if (held[i] != next_idx - int32_t(held.size() - i)) return -1;
  return int32_t(held.size());
}

void KVCache::check_exact() const {
  exact_->check_invariants();
  // The window holds, per layer, a contiguous range of positions ending at the
  // sequence's last token, in cells of tokens this cache holds too.
  for (const auto& [id, e] : exact_->sequences_) {
    auto it = sequences_.find(id);
    if (it == sequences_.end() || it->second.next_idx != e.next_idx)
      fail(ErrorCode::internal, "exact window: sequence {} differs from the cache", id);
    for (const Layer& l : e.layers) {
      const int32_t held = newest_held(l, e.next_idx);
      if (held < 0) fail(ErrorCode::internal, "exact window: sequence {} holds positions that are not its newest", id);
      if (held < std::min(e.next_idx, config_.exact_recent - 1))
        fail(ErrorCode::internal, "exact window: sequence {} holds {} positions, fewer than {}", id, held,
             config_.exact_recent - 1);
    }
  }
}

}  // namespace ember::kv
