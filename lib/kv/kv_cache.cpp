#include "kv/kv_cache.hpp"

#include <algorithm>
#include <numeric>
#include <set>

#include "backend/ops/kv_store.hpp"
#include "common/fail.hpp"

namespace ember::kv {
namespace {

std::shared_ptr<Pool> own_pool(backend::Backend& backend, const CacheConfig& c) {
  require(c.page_tokens > 0, "KV cache: page_tokens must be > 0, got {}", c.page_tokens);
  require(c.max_tokens > 0, "KV cache: max_tokens must be > 0, got {}", c.max_tokens);
  require(c.n_layer > 0, "KV cache: n_layer must be > 0, got {}", c.n_layer);
  PoolConfig pc;
  pc.k_width = c.k_width;
  pc.v_width = c.v_width;
  pc.storage = c.storage;
  pc.v_storage = c.v_storage;
  pc.page_tokens = c.page_tokens;
  pc.n_pages = (c.max_tokens + c.page_tokens - 1) / c.page_tokens * c.n_layer;
  return std::make_shared<Pool>(backend, pc);
}

}  // namespace

KVCache::KVCache(std::shared_ptr<Pool> pool, backend::Backend& backend, const CacheConfig& config)
    : pool_(std::move(pool)), be_(backend), config_(config) {
  validate_config();
}

KVCache::KVCache(backend::Backend& backend, const CacheConfig& config)
    : pool_(own_pool(backend, config)), be_(backend), config_(config) {
  validate_config();
}

void Placement::append(const Placement& other) {
  if (slots.size() < other.slots.size()) slots.resize(other.slots.size());
  for (size_t l = 0; l < other.slots.size(); ++l) slots[l].insert(slots[l].end(), other.slots[l].begin(), other.slots[l].end());
  first_idx.insert(first_idx.end(), other.first_idx.begin(), other.first_idx.end());
  stepwise.insert(stepwise.end(), other.stepwise.begin(), other.stepwise.end());
  if (exact_slots.size() < other.exact_slots.size()) exact_slots.resize(other.exact_slots.size());
  for (size_t l = 0; l < other.exact_slots.size(); ++l)
    exact_slots[l].insert(exact_slots[l].end(), other.exact_slots[l].begin(), other.exact_slots[l].end());
  exact_first_idx.insert(exact_first_idx.end(), other.exact_first_idx.begin(), other.exact_first_idx.end());
}

KVCache::~KVCache() {
  while (!snapshots_.empty()) drop_snapshot(snapshots_.begin()->first);
  for (auto& [id, s] : sequences_) release_all(s);
}

void KVCache::validate_policy(const SeqPolicy& p) const {
  require(p.max_tokens > 0, "KV cache: the token budget (max_seq_tokens) must be > 0, got {}", p.max_tokens);
  const EvictionConfig& e = p.eviction;
  require(config_.exact_recent <= 0 || e.policy == Eviction::none,
          "KV cache: an exact window of the newest tokens works with eviction none only");
  switch (e.policy) {
    case Eviction::none: break;
    case Eviction::streaming:
      require(e.sinks >= 0, "KV cache: StreamingLLM sinks must be >= 0, got {}", e.sinks);
      require(p.max_tokens > e.sinks,
              "KV cache: the StreamingLLM window must be larger than the sinks (budget {} with {} sinks)",
              p.max_tokens, e.sinks);
      break;
    case Eviction::h2o:
      require(e.heavy >= 0 && e.recent >= 1, "KV cache: H2O needs heavy >= 0 and recent >= 1 (got {} and {})",
              e.heavy, e.recent);
      require(int64_t(e.heavy) + e.recent == p.max_tokens, "KV cache: H2O budget {} is not heavy {} + recent {}",
              p.max_tokens, e.heavy, e.recent);
      break;
    default: fail(ErrorCode::invalid_argument, "KV cache: unknown eviction policy {}", int(e.policy));
  }
}

void KVCache::validate_config() const {
  const CacheConfig& c = config_;
  require(pool_ != nullptr, "KV cache: no page pool");
  require(c.n_layer > 0, "KV cache: n_layer must be > 0, got {}", c.n_layer);
  require(c.exact_recent >= 0 && c.exact_recent <= (1 << 20), "KV cache: exact_recent must be in [0, 2^20], got {}",
          c.exact_recent);
  require(c.layer_window.empty() || int(c.layer_window.size()) == c.n_layer,
          "KV cache: {} layer windows for {} layers", c.layer_window.size(), c.n_layer);
  for (int32_t w : c.layer_window) require(w >= 0, "KV cache: a sliding window must be >= 0, got {}", w);
  validate_policy({c.max_seq_tokens, c.eviction});
}

void KVCache::set_policy(int32_t seq, const SeqPolicy& policy) {
  require(seq >= 0, "sequence id must be >= 0, got {}", seq);
  validate_policy(policy);
  policies_[seq] = policy;
}

void KVCache::erase_policy(int32_t seq) { policies_.erase(seq); }

SeqPolicy KVCache::policy(int32_t seq) const {
  auto it = policies_.find(seq);
  return it != policies_.end() ? it->second : SeqPolicy{config_.max_seq_tokens, config_.eviction};
}

int64_t KVCache::pages_needed(int32_t seq, int32_t n_new) const {
  const int32_t pt = page_tokens();
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return int64_t(config_.n_layer) * ((int64_t(n_new) + pt - 1) / pt);
  int64_t pages = 0;
  for (const Layer& l : it->second.layers) {
    const auto cells = int64_t(l.pos.size());
    pages += std::max<int64_t>(0, (cells + n_new + pt - 1) / pt - int64_t(l.pages.size()));
    if (cells % pt != 0 && pool_->refcount(l.pages.back()) > 1) ++pages;  // copy on write
  }
  return pages;
}

int32_t KVCache::n_cells(int32_t seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return 0;
  int32_t most = 0;
  for (const Layer& l : it->second.layers) most = std::max(most, l.live);
  return most;
}

int32_t KVCache::next_index(int32_t seq) const {
  auto it = sequences_.find(seq);
  return it == sequences_.end() ? 0 : it->second.next_idx;
}

std::vector<int32_t> KVCache::sequences() const {
  std::vector<int32_t> ids;
  for (const auto& [id, s] : sequences_) ids.push_back(id);
  return ids;
}

SeqStats KVCache::stats(int32_t seq) const {
  SeqStats st;
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return st;
  for (const Layer& l : it->second.layers) {
    st.tokens = std::max(st.tokens, l.live);
    st.pages += int32_t(l.pages.size());
    for (int32_t p : l.pages)
      if (pool_->refcount(p) > 1) ++st.shared_pages;
  }
  return st;
}

// ---- row copies ----

void KVCache::copy_pool_rows(std::span<const int32_t> from, std::span<const int32_t> to) {
  if (from.empty()) return;
  const auto n = int64_t(from.size());
  auto buffer = be_.allocate(size_t(2 * n) * sizeof(int32_t));
  const backend::Tensor src = backend::make_tensor(*buffer, 0, quant::DType::i32, n, 1);
  const backend::Tensor dst = backend::make_tensor(*buffer, size_t(n) * sizeof(int32_t), quant::DType::i32, n, 1);
  be_.upload(src, from.data());
  be_.upload(dst, to.data());
  ops::copy_rows(be_, pool_->k(), src, dst);
  ops::copy_rows(be_, pool_->v(), src, dst);
  be_.synchronize();
}

// Copy on write: gives the layer its own copy of a page others also hold.
void KVCache::make_writable(Layer& l, size_t page_index, bool appending) {
  const int32_t page = l.pages[page_index];
  int32_t holders = pool_->refcount(page);
  if (appending) {
    auto held = snapshot_refs_.find(page);
    if (held != snapshot_refs_.end()) holders -= held->second;
  }
  if (holders <= 1) return;
  const int32_t fresh = pool_->acquire(1)[0];
  const int32_t pt = page_tokens();
  std::vector<int32_t> from(static_cast<size_t>(pt)), to(static_cast<size_t>(pt));
  for (int32_t i = 0; i < pt; ++i) from[size_t(i)] = page * pt + i, to[size_t(i)] = fresh * pt + i;
  try {
    copy_pool_rows(from, to);
  } catch (...) {
    pool_->release(fresh);
    throw;
  }
  l.pages[page_index] = fresh;
  pool_->release(page);
}

// ---- dropping cells ----

// Frees whole pages whose cells are all empty (cells of later pages move down).
void KVCache::drop_empty_pages(Layer& l) {
  const int32_t pt = page_tokens();
  const auto n_cells = int32_t(l.pos.size());
  std::vector<int32_t> pages;
  std::vector<int32_t> idx, pos;
  std::vector<float> score;
  for (size_t p = 0; p < l.pages.size(); ++p) {
    const int32_t c0 = int32_t(p) * pt, c1 = std::min(n_cells, c0 + pt);
    bool empty = true;
    for (int32_t c = c0; c < c1 && empty; ++c) empty = l.pos[size_t(c)] < 0;
    if (empty) {
      pool_->release(l.pages[p]);
      continue;
    }
    pages.push_back(l.pages[p]);
    idx.insert(idx.end(), l.idx.begin() + c0, l.idx.begin() + c1);
    pos.insert(pos.end(), l.pos.begin() + c0, l.pos.begin() + c1);
    score.insert(score.end(), l.score.begin() + c0, l.score.begin() + c1);
    // Only the last page may be partly filled: pad a kept page that is not last.
    if (c1 - c0 < pt && p + 1 < l.pages.size())
      fail(ErrorCode::internal, "KV cache: a page other than the last is partly filled");
  }
  // The cells of a kept partial page must stay last; drop trailing empty cells.
  while (!pos.empty() && pos.back() < 0 && pos.size() % size_t(pt) != 0) {
    idx.pop_back(), pos.pop_back(), score.pop_back();
  }
  l.pages = std::move(pages);
  l.idx = std::move(idx);
  l.pos = std::move(pos);
  l.score = std::move(score);
}

void KVCache::free_window(Layer& l, int32_t window, int32_t first_new_pos) {
  if (window <= 0) return;
  bool any = false;
  for (size_t c = 0; c < l.pos.size(); ++c) {
    if (l.pos[c] >= 0 && first_new_pos - l.pos[c] >= window) {
      l.dropped_max = std::max(l.dropped_max, l.idx[c]);
      l.pos[c] = -1;
      --l.live;
      any = true;
    }
  }
  if (any) drop_empty_pages(l);
}

// Moves live cells from the tail into the holes below, then frees the tail pages.
void KVCache::compact(Layer& l) {
  std::vector<int32_t> from, to;
  auto lo = int32_t(0), hi = int32_t(l.pos.size()) - 1;
  for (;;) {
    while (lo <= hi && l.pos[size_t(lo)] >= 0) ++lo;
    while (hi >= lo && l.pos[size_t(hi)] < 0) --hi;
    if (lo >= hi) break;
    make_writable(l, size_t(lo / page_tokens()));
    from.push_back(slot(l, hi));
    to.push_back(slot(l, lo));
    l.idx[size_t(lo)] = l.idx[size_t(hi)];
    l.pos[size_t(lo)] = l.pos[size_t(hi)];
    l.score[size_t(lo)] = l.score[size_t(hi)];
    l.pos[size_t(hi)] = -1;
    ++lo, --hi;
  }
  copy_pool_rows(from, to);
  // Everything from the first hole on is empty now.
  auto keep = size_t(0);
  while (keep < l.pos.size() && l.pos[keep] >= 0) ++keep;
  const size_t old_cells = l.pos.size();
  l.idx.resize(keep), l.pos.resize(keep), l.score.resize(keep);
  const size_t pages_kept = (keep + size_t(page_tokens()) - 1) / size_t(page_tokens());
  while (l.pages.size() > pages_kept) {
    pool_->release(l.pages.back());
    l.pages.pop_back();
  }
  // The next appends rewrite the rows cut from the last page's tail, which a snapshot
  // may still hold (an append copies only pages shared beyond the snapshots): that
  // page must be this layer's own first.
  if (keep % size_t(page_tokens()) != 0 && keep < old_cells) make_writable(l, l.pages.size() - 1);
}

void KVCache::evict_streaming(Sequence& s, const SeqPolicy& p, int layer, int32_t n_drop) {
  Layer& l = s.layers[size_t(layer)];
  const int32_t sinks = p.eviction.sinks;
  // The sinks are the first `sinks` live cells (cells keep their order in this mode).
  std::vector<int32_t> sink_cells;
  size_t c = 0;
  for (; c < l.pos.size() && int32_t(sink_cells.size()) < sinks; ++c)
    if (l.pos[c] >= 0) sink_cells.push_back(int32_t(c));
  if (!sink_cells.empty() && s.sink_keys[size_t(layer)].empty()) {
    // Capture the sinks' keys as first stored, before any move rewrites them.
    const int64_t width = pool_->config().k_width;
    const auto n = int64_t(sink_cells.size());
    const size_t rows_at = (size_t(n) * sizeof(int32_t) + 63) / 64 * 64;
    auto buffer = be_.allocate(rows_at + size_t(n * width) * sizeof(float));
    const backend::Tensor slots = backend::make_tensor(*buffer, 0, quant::DType::i32, n, 1);
    const backend::Tensor rows = backend::make_tensor(*buffer, rows_at, quant::DType::f32, n, width);
    std::vector<int32_t> ids;
    for (int32_t sc : sink_cells) ids.push_back(slot(l, sc));
    be_.upload(slots, ids.data());
    ops::kv_load(be_, pool_->k(), slots, rows);
    s.sink_keys[size_t(layer)].resize(size_t(n * width));
    be_.download(rows, s.sink_keys[size_t(layer)].data());
    auto& orig = s.sink_orig_pos[size_t(layer)];
    orig.clear();
    for (int32_t sc : sink_cells) orig.push_back(l.pos[size_t(sc)]);
  }
  for (; c < l.pos.size() && n_drop > 0; ++c) {
    if (l.pos[c] < 0) continue;
    l.dropped_max = std::max(l.dropped_max, l.idx[c]);
    l.pos[c] = -1;
    --l.live;
    --n_drop;
  }
  drop_empty_pages(l);
  // Sinks sit just before the first kept non-sink token: their distance to every
  // query is then what it would be in a cache re-indexed from 0 (StreamingLLM §3.2).
  int32_t first_kept = -1;
  int32_t seen = 0;
  for (size_t i = 0; i < l.pos.size(); ++i) {
    if (l.pos[i] < 0) continue;
    if (seen++ < int32_t(sink_cells.size())) continue;
    first_kept = l.pos[i];
    break;
  }
  if (first_kept < 0) return;
  seen = 0;
  const auto k = int32_t(sink_cells.size());
  for (size_t i = 0; i < l.pos.size() && seen < k; ++i) {
    if (l.pos[i] < 0) continue;
    const int32_t want = first_kept - k + seen;
    ++seen;
    if (l.pos[i] == want) continue;
    make_writable(l, i / size_t(page_tokens()));
    l.pos[i] = want;
    s.moved.emplace_back(layer, int32_t(i));
  }
}

void KVCache::evict_h2o(Layer& l, const SeqPolicy& p, int32_t n_new, int32_t n_drop) {
  // The most recent (recent - n_new) live tokens are protected.
  std::vector<int32_t> live;
  for (size_t c = 0; c < l.pos.size(); ++c)
    if (l.pos[c] >= 0) live.push_back(int32_t(c));
  std::sort(live.begin(), live.end(), [&](int32_t a, int32_t b) { return l.idx[size_t(a)] < l.idx[size_t(b)]; });
  const int32_t protect = std::max(0, p.eviction.recent - n_new);
  const int64_t n_candidates = std::max<int64_t>(0, int64_t(live.size()) - protect);
  if (n_candidates < n_drop)
    fail(ErrorCode::cache_full, "KV cache full: H2O cannot free {} cells ({} outside the recent window)", n_drop,
         n_candidates);
  std::vector<int32_t> cand(live.begin(), live.begin() + n_candidates);
  // Lowest accumulated attention first; older first among equals.
  std::stable_sort(cand.begin(), cand.end(),
                   [&](int32_t a, int32_t b) { return l.score[size_t(a)] < l.score[size_t(b)]; });
  for (int32_t i = 0; i < n_drop; ++i) {
    const auto c = size_t(cand[size_t(i)]);
    l.dropped_max = std::max(l.dropped_max, l.idx[c]);
    l.pos[c] = -1;
    --l.live;
  }
  compact(l);
}

void KVCache::evict(Sequence& s, const SeqPolicy& p, int layer, int32_t n_new) {
  Layer& l = s.layers[size_t(layer)];
  const int64_t over = int64_t(l.live) + n_new - p.max_tokens;
  if (over <= 0) return;
  switch (p.eviction.policy) {
    case Eviction::none:
      fail(ErrorCode::cache_full, "KV cache full: the sequence holds {} tokens, {} more exceed its budget of {}",
           l.live, n_new, p.max_tokens);
    case Eviction::streaming:
      if (int64_t(n_new) > int64_t(p.max_tokens) - p.eviction.sinks)
        fail(ErrorCode::cache_full, "KV cache full: {} new tokens do not fit a StreamingLLM window of {}", n_new,
             p.max_tokens - p.eviction.sinks);
      evict_streaming(s, p, layer, int32_t(over));
      break;
    case Eviction::h2o:
      evict_h2o(l, p, n_new, int32_t(over));
      break;
  }
}

// ---- step transactions ----

// Per layer: true when placing `n_new` tokens from `first_new_pos` on would drop or move cells.
std::vector<char> KVCache::layers_dropping(const Sequence& s, const SeqPolicy& p, int32_t n_new,
                                           int32_t first_new_pos) const {
  std::vector<char> out(size_t(config_.n_layer), 0);
  for (int layer = 0; layer < config_.n_layer; ++layer) {
    const Layer& l = s.layers[size_t(layer)];
    if (int64_t(l.live) + n_new > p.max_tokens) {
      out[size_t(layer)] = 1;
      continue;
    }
    const int32_t w = config_.layer_window.empty() ? 0 : config_.layer_window[size_t(layer)];
    if (w > 0)
      for (int32_t pos : l.pos)
        if (pos >= 0 && first_new_pos - pos >= w) {
          out[size_t(layer)] = 1;
          break;
        }
  }
  return out;
}

void KVCache::take_snapshot(int32_t seq, const Sequence& s, const std::vector<char>* layers) {
  if (snapshots_.count(seq)) return;
  Snapshot snap;
  snap.saved = layers ? *layers : std::vector<char>(s.layers.size(), 1);
  snap.seq.next_idx = s.next_idx;
  snap.seq.moved = s.moved;
  snap.seq.layers.resize(s.layers.size());
  snap.seq.sink_keys.resize(s.layers.size());
  snap.seq.sink_orig_pos.resize(s.layers.size());
  for (size_t li = 0; li < s.layers.size(); ++li) {
    if (!snap.saved[li]) continue;
    snap.seq.layers[li] = s.layers[li];
    snap.seq.sink_keys[li] = s.sink_keys[li];
    snap.seq.sink_orig_pos[li] = s.sink_orig_pos[li];
    for (int32_t p : s.layers[li].pages) {
      pool_->retain(p);
      ++snapshot_refs_[p];
    }
  }
  snapshots_.emplace(seq, std::move(snap));
}

void KVCache::drop_snapshot(int32_t seq) {
  step_logs_.erase(seq);
  auto it = snapshots_.find(seq);
  if (it == snapshots_.end()) return;
  for (const Layer& l : it->second.seq.layers)
    for (int32_t p : l.pages) {
      if (--snapshot_refs_[p] == 0) snapshot_refs_.erase(p);
      pool_->release(p);
    }
  snapshots_.erase(it);
}

void KVCache::commit(const Placement& placement) {
  if (exact_) exact_->commit(exact_part(placement));
  for (const auto& [seq, first] : placement.first_idx)
    if (!step_logs_.count(seq)) drop_snapshot(seq);  // a stepwise step keeps it for truncate()
}

// ---- placing ----

Placement KVCache::place(std::span<const CellRequest> requests) {
  std::map<int32_t, std::vector<int32_t>> new_pos;  // per sequence, in order
  for (const CellRequest& r : requests) {
    require(r.seq >= 0, "sequence id must be >= 0, got {}", r.seq);
    require(r.pos >= 0, "position must be >= 0, got {} (sequence {})", r.pos, r.seq);
    new_pos[r.seq].push_back(r.pos);
  }
  const int32_t pt = page_tokens();
  // A new step of a sequence ends its previous one.
  for (const auto& [seq, list] : new_pos) drop_snapshot(seq);
  // Budget check first (policy none), so that a batch that does not fit changes nothing.
  for (const auto& [seq, list] : new_pos) {
    const SeqPolicy p = policy(seq);
    if (p.eviction.policy != Eviction::none) continue;
    auto it = sequences_.find(seq);
    if (it == sequences_.end()) {
      if (int64_t(list.size()) > p.max_tokens)
        fail(ErrorCode::cache_full, "KV cache full: {} tokens exceed the sequence budget of {}", list.size(),
             p.max_tokens);
      continue;
    }
    for (int layer = 0; layer < config_.n_layer; ++layer) {
      const Layer& l = it->second.layers[size_t(layer)];
      const int32_t w = config_.layer_window.empty() ? 0 : config_.layer_window[size_t(layer)];
      int32_t live = l.live;
      if (w > 0) {
        const int32_t first = *std::min_element(list.begin(), list.end());
        for (int32_t pos : l.pos)
          if (pos >= 0 && first - pos >= w) --live;
      }
      if (int64_t(live) + int64_t(list.size()) > p.max_tokens)
        fail(ErrorCode::cache_full, "KV cache full: sequence {} holds {} tokens, {} more exceed its budget of {}",
             seq, live, list.size(), p.max_tokens);
    }
  }

  Placement placement;
  placement.slots.assign(size_t(config_.n_layer), {});
  for (const auto& [seq, list] : new_pos) placement.first_idx.emplace_back(seq, next_index(seq));
  try {
    // Make room: sliding windows, then the eviction policy; a snapshot first, so
    // that a failure (here or in the forward pass) restores what was dropped.
    int64_t pages_needed = 0;
    for (const auto& [seq, list] : new_pos) {
      const SeqPolicy p = policy(seq);
      auto [it, inserted] = sequences_.try_emplace(seq);
      Sequence& s = it->second;
      if (inserted) {
        s.layers.resize(size_t(config_.n_layer));
        s.sink_keys.resize(size_t(config_.n_layer));
        s.sink_orig_pos.resize(size_t(config_.n_layer));
      }
      const auto n = int32_t(list.size());
      const int32_t first = *std::min_element(list.begin(), list.end());
      if (!inserted) {
        const std::vector<char> dropping = layers_dropping(s, p, n, first);
        if (std::find(dropping.begin(), dropping.end(), 1) != dropping.end()) take_snapshot(seq, s, &dropping);
      }
      for (int layer = 0; layer < config_.n_layer; ++layer) {
        Layer& l = s.layers[size_t(layer)];
        const int32_t w = config_.layer_window.empty() ? 0 : config_.layer_window[size_t(layer)];
        free_window(l, w, first);
        evict(s, p, layer, n);
        const auto cells = int64_t(l.pos.size());
        const int64_t want = (cells + n + pt - 1) / pt;
        pages_needed += std::max<int64_t>(0, want - int64_t(l.pages.size()));
        if (cells % pt != 0) {
          int32_t holders = pool_->refcount(l.pages.back());
          auto held = snapshot_refs_.find(l.pages.back());
          if (held != snapshot_refs_.end()) holders -= held->second;
          if (holders > 1) ++pages_needed;  // copy on write
        }
      }
    }
    // Fail before adding anything when the pool is short.
    if (pages_needed > pool_->stats().pages_free)
      fail(ErrorCode::cache_full, "KV cache full: the batch needs {} more pages of {} tokens, {} are free",
           pages_needed, pt, pool_->stats().pages_free);

    for (int layer = 0; layer < config_.n_layer; ++layer) {
      auto& out = placement.slots[size_t(layer)];
      out.reserve(requests.size());
      for (const CellRequest& r : requests) out.push_back(append_cell(sequences_[r.seq].layers[size_t(layer)], r.pos));
    }
  } catch (...) {
    undo(placement);
    throw;
  }
  for (const CellRequest& r : requests) {
    Sequence& s = sequences_[r.seq];
    s.next_idx = std::max(s.next_idx, r.pos + 1);
  }
  if (exact_) {
    try {
      Placement e = exact_->place(requests);
      placement.exact_slots = std::move(e.slots);
      placement.exact_first_idx = std::move(e.first_idx);
    } catch (...) {
      undo(placement);
      throw;
    }
  }
  return placement;
}

int32_t KVCache::append_cell(Layer& l, int32_t pos) {
  const int32_t pt = page_tokens();
  const auto cell = int32_t(l.pos.size());
  if (cell % pt == 0) {
    l.pages.push_back(pool_->acquire(1)[0]);
  } else if ((cell - 1) / pt == int32_t(l.pages.size()) - 1) {
    make_writable(l, l.pages.size() - 1, /*appending=*/true);
  }
  l.idx.push_back(pos);
  l.pos.push_back(pos);
  l.score.push_back(0.0f);
  ++l.live;
  return slot(l, cell);
}

// Back to the sequence as it was before the open step (the snapshot's page references
// pass back to it).
void KVCache::restore_snapshot(int32_t seq, int32_t first) {
  auto snap = snapshots_.find(seq);
  Snapshot& saved = snap->second;
  for (const Layer& l : saved.seq.layers)
    for (int32_t p : l.pages)
      if (--snapshot_refs_[p] == 0) snapshot_refs_.erase(p);
  Sequence& s = sequences_[seq];
  s.layers.resize(saved.seq.layers.size());
  s.sink_keys.resize(saved.seq.layers.size());
  s.sink_orig_pos.resize(saved.seq.layers.size());
  for (size_t li = 0; li < saved.seq.layers.size(); ++li) {
    Layer& l = s.layers[li];
    if (!saved.saved[li]) {
      pop_cells(l, first);
      continue;
    }
    for (int32_t p : l.pages) pool_->release(p);
    l = std::move(saved.seq.layers[li]);
    s.sink_keys[li] = std::move(saved.seq.sink_keys[li]);
    s.sink_orig_pos[li] = std::move(saved.seq.sink_orig_pos[li]);
  }
  s.moved = std::move(saved.seq.moved);
  s.next_idx = saved.seq.next_idx;
  snapshots_.erase(snap);
  step_logs_.erase(seq);
}

void KVCache::pop_cells(Layer& l, int32_t first) {
  while (!l.idx.empty() && l.idx.back() >= first) {
    if (l.pos.back() >= 0) --l.live;
    l.idx.pop_back(), l.pos.pop_back(), l.score.pop_back();
  }
  const size_t pages_kept = (l.pos.size() + size_t(page_tokens()) - 1) / size_t(page_tokens());
  while (l.pages.size() > pages_kept) {
    pool_->release(l.pages.back());
    l.pages.pop_back();
  }
}

void KVCache::undo(const Placement& placement) {
  if (exact_) exact_->undo(exact_part(placement));
  for (const auto& [seq, first] : placement.first_idx) {
    if (snapshots_.count(seq)) {
      restore_snapshot(seq, first);
      continue;
    }
    auto it = sequences_.find(seq);
    if (it == sequences_.end()) continue;
    Sequence& s = it->second;
    for (Layer& l : s.layers) pop_cells(l, first);
    s.next_idx = std::min(s.next_idx, first);
    if (s.next_idx == 0) {
      release_all(s);
      sequences_.erase(it);
    }
  }
}

void KVCache::trim_windows(int32_t seq) {
  if (exact_) exact_->trim_windows(seq);
  auto it = sequences_.find(seq);
  if (it == sequences_.end() || config_.layer_window.empty()) return;
  for (int layer = 0; layer < config_.n_layer; ++layer)
    // A page of slack keeps short rewinds (a cancelled token, a regenerated word) exact.
    free_window(it->second.layers[size_t(layer)], config_.layer_window[size_t(layer)],
                it->second.next_idx - page_tokens());
}

// ---- tables for the attention op ----

void KVCache::layer_tables(int layer, std::span<const int32_t> seqs, LayerTables& out) const {
  out.max_pages = 1;
  out.max_cells = 1;
  for (int32_t seq : seqs) {
    auto it = sequences_.find(seq);
    if (it == sequences_.end()) continue;
    const Layer& l = it->second.layers[size_t(layer)];
    out.max_pages = std::max<int64_t>(out.max_pages, int64_t(l.pages.size()));
    out.max_cells = std::max<int64_t>(out.max_cells, int64_t(l.pos.size()));
  }
  const auto rows = seqs.size();
  out.page_table.assign(rows * size_t(out.max_pages), 0);
  out.cell_pos.assign(rows * size_t(out.max_cells), -1);
  out.cells.assign(rows, 0);
  for (size_t r = 0; r < rows; ++r) {
    auto it = sequences_.find(seqs[r]);
    if (it == sequences_.end()) continue;
    const Layer& l = it->second.layers[size_t(layer)];
    std::copy(l.pages.begin(), l.pages.end(), out.page_table.begin() + long(r * size_t(out.max_pages)));
    std::copy(l.pos.begin(), l.pos.end(), out.cell_pos.begin() + long(r * size_t(out.max_cells)));
    out.cells[r] = int32_t(l.pos.size());
  }
}

void KVCache::add_scores(int layer, std::span<const int32_t> seqs, int64_t max_cells, int n_head_kv,
                         std::span<const float> scores) {
  for (size_t r = 0; r < seqs.size(); ++r) {
    auto it = sequences_.find(seqs[r]);
    if (it == sequences_.end()) continue;
    Layer& l = it->second.layers[size_t(layer)];
    const float* row = scores.data() + r * size_t(max_cells * n_head_kv);
    for (size_t c = 0; c < l.score.size(); ++c)
      for (int h = 0; h < n_head_kv; ++h) l.score[c] += row[c * size_t(n_head_kv) + size_t(h)];
  }
}

std::vector<SinkMove> KVCache::take_sink_moves(int32_t seq) {
  std::vector<SinkMove> moves;
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return moves;
  Sequence& s = it->second;
  const int64_t width = pool_->config().k_width;
  for (const auto& [layer, cell] : s.moved) {
    const Layer& l = s.layers[size_t(layer)];
    if (size_t(cell) >= l.pos.size() || l.pos[size_t(cell)] < 0) continue;
    const auto& orig = s.sink_orig_pos[size_t(layer)];
    const auto at = std::find(orig.begin(), orig.end(), l.idx[size_t(cell)]);
    if (at == orig.end()) continue;
    const auto k = size_t(at - orig.begin());
    moves.push_back({layer, slot(l, cell), l.pos[size_t(cell)] - l.idx[size_t(cell)],
                     s.sink_keys[size_t(layer)].data() + k * size_t(width)});
  }
  s.moved.clear();
  return moves;
}

// ---- rewind, removal, fork ----

bool KVCache::truncate(int32_t seq, int32_t n_tokens) {
  require(n_tokens >= 0, "rewind: position must be >= 0, got {}", n_tokens);
  if (exact_) exact_->truncate(seq, n_tokens);
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return n_tokens == 0;
  Sequence& s = it->second;
  auto log = step_logs_.find(seq);
  if (log != step_logs_.end() && n_tokens >= log->second.first && n_tokens < log->second.first + log->second.n) {
    replay_step(seq, n_tokens - log->second.first);
    return true;
  }
  drop_snapshot(seq);
  const SeqPolicy p = policy(seq);
  bool exact = true;
  for (int layer = 0; layer < config_.n_layer; ++layer) {
    Layer& l = s.layers[size_t(layer)];
    bool holes = false;
    for (size_t c = 0; c < l.pos.size(); ++c) {
      if (l.idx[c] < n_tokens) continue;
      if (l.pos[c] >= 0) --l.live;
      l.pos[c] = -1;
      holes = true;
    }
    if (holes) compact(l);
    const int32_t w = config_.layer_window.empty() ? 0 : config_.layer_window[size_t(layer)];
    // What a query at n_tokens needs: everything before it, or its window.
    const int32_t needed_from = p.eviction.policy != Eviction::none ? n_tokens
                                : w > 0                                   ? std::max(0, n_tokens - w + 1)
                                                                          : 0;
    if (l.dropped_max >= needed_from) exact = false;
    // Tokens from n_tokens on are gone, dropped or not (a saved state checks this).
    l.dropped_max = std::min(l.dropped_max, n_tokens - 1);
  }
  s.next_idx = std::min(s.next_idx, n_tokens);
  if (s.next_idx == 0) remove(seq);
  refill_exact(seq);
  return exact;
}

void KVCache::release_all(Sequence& s) {
  for (Layer& l : s.layers)
    for (int32_t p : l.pages) pool_->release(p);
  for (Layer& l : s.layers) l.pages.clear();
}

void KVCache::remove(int32_t seq) {
  if (exact_) exact_->remove(seq);
  drop_snapshot(seq);
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return;
  release_all(it->second);
  sequences_.erase(it);
}

void KVCache::clear() {
  while (!sequences_.empty()) remove(sequences_.begin()->first);
  if (exact_) exact_->clear();
}

void KVCache::fork_from(const KVCache& from, int32_t src, int32_t dst) {
  if (from.pool_ != pool_) fail(ErrorCode::invalid_argument, "fork: the two caches use different page pools");
  if (from.config_.n_layer != config_.n_layer) fail(ErrorCode::invalid_argument, "fork: layer counts differ");
  if ((from.exact_ == nullptr) != (exact_ == nullptr))
    fail(ErrorCode::invalid_argument, "fork: one cache has an exact window and the other not");
  remove(dst);
  if (exact_) exact_->fork_from(*from.exact_, src, dst);
  auto it = from.sequences_.find(src);
  if (it == from.sequences_.end()) return;
  Sequence copy = it->second;
  for (const Layer& l : copy.layers)
    for (int32_t p : l.pages) pool_->retain(p);
  sequences_[dst] = std::move(copy);
}

void KVCache::check_invariants(std::map<int32_t, int32_t>* refs) const {
  if (exact_) check_exact();
  const int32_t pt = page_tokens();
  for (const auto& [id, s] : sequences_) {
    if (int(s.layers.size()) != config_.n_layer) fail(ErrorCode::internal, "sequence {}: wrong layer count", id);
    for (size_t li = 0; li < s.layers.size(); ++li) {
      const Layer& l = s.layers[li];
      if (l.idx.size() != l.pos.size() || l.score.size() != l.pos.size())
        fail(ErrorCode::internal, "sequence {} layer {}: table sizes differ", id, li);
      if (l.pages.size() != (l.pos.size() + size_t(pt) - 1) / size_t(pt))
        fail(ErrorCode::internal, "sequence {} layer {}: {} pages for {} cells", id, li, l.pages.size(), l.pos.size());
      int32_t live = 0;
      std::set<int32_t> seen_idx;
      for (size_t c = 0; c < l.pos.size(); ++c) {
        if (l.pos[c] < 0) continue;
        ++live;
        if (!seen_idx.insert(l.idx[c]).second)
          fail(ErrorCode::internal, "sequence {} layer {}: token {} held twice", id, li, l.idx[c]);
        if (l.idx[c] >= s.next_idx) fail(ErrorCode::internal, "sequence {} layer {}: token beyond next index", id, li);
      }
      if (live != l.live) fail(ErrorCode::internal, "sequence {} layer {}: live count {} != {}", id, li, l.live, live);
      if (live > policy(id).max_tokens)
        fail(ErrorCode::internal, "sequence {} layer {}: {} cells exceed the budget", id, li, live);
      std::set<int32_t> pages(l.pages.begin(), l.pages.end());
      if (pages.size() != l.pages.size()) fail(ErrorCode::internal, "sequence {} layer {}: a page twice", id, li);
      for (int32_t p : l.pages) {
        if (pool_->refcount(p) <= 0) fail(ErrorCode::internal, "sequence {} holds free page {}", id, p);
        if (refs) ++(*refs)[p];
      }
    }
  }
  if (refs)
    for (const auto& [id, snap] : snapshots_)
      for (const Layer& l : snap.seq.layers)
        for (int32_t p : l.pages) ++(*refs)[p];
}

}  // namespace ember::kv
