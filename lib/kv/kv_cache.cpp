#include "kv/kv_cache.hpp"

#include <algorithm>

#include "common/fail.hpp"

namespace ember::kv {

KVCache::KVCache(backend::Backend& backend, const CacheConfig& config)
    : config_(config),
      pool_([&] {
        require(config.page_tokens > 0, "KV cache: page_tokens must be > 0, got {}", config.page_tokens);
        require(config.max_tokens > 0, "KV cache: max_tokens must be > 0, got {}", config.max_tokens);
        return (config.max_tokens + config.page_tokens - 1) / config.page_tokens;
      }()) {
  require(config.n_layer > 0 && config.k_width > 0 && config.v_width > 0, "KV cache: empty layer shape");
  require(config.storage == quant::DType::f16 || config.storage == quant::DType::f32,
          "KV cache: storage type {} is not supported (F16 or F32)", quant::type_name(config.storage));
  require(config.max_seq_tokens > 0, "KV cache: max_seq_tokens must be > 0, got {}", config.max_seq_tokens);
  slot_pos_.assign(size_t(n_slots()), -1);
  for (int layer = 0; layer < config.n_layer; ++layer) {
    const size_t k_bytes = quant::row_bytes(config.storage, config.k_width) * size_t(n_slots());
    const size_t v_bytes = quant::row_bytes(config.storage, config.v_width) * size_t(n_slots());
    auto buffer = backend.allocate(k_bytes + v_bytes);
    k_.push_back(backend::make_tensor(*buffer, 0, config.storage, n_slots(), config.k_width));
    v_.push_back(backend::make_tensor(*buffer, k_bytes, config.storage, n_slots(), config.v_width));
    buffers_.push_back(std::move(buffer));
  }
}

size_t KVCache::bytes() const {
  size_t total = 0;
  for (const auto& b : buffers_) total += b->size();
  return total;
}

int32_t KVCache::n_cells(int32_t seq) const {
  auto it = sequences_.find(seq);
  return it == sequences_.end() ? 0 : it->second.cells;
}

std::span<const int32_t> KVCache::pages(int32_t seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return {};
  return it->second.pages;
}

std::vector<int32_t> KVCache::sequences() const {
  std::vector<int32_t> ids;
  for (const auto& [id, s] : sequences_)
    if (s.cells > 0) ids.push_back(id);
  return ids;
}

int32_t KVCache::slot_of(const Sequence& s, int32_t cell) const {
  return s.pages[size_t(cell / config_.page_tokens)] * config_.page_tokens + cell % config_.page_tokens;
}

Placement KVCache::place(std::span<const CellRequest> requests) {
  // Count what each sequence needs first, so that a failure changes nothing.
  std::map<int32_t, int32_t> new_cells;
  for (const CellRequest& r : requests) {
    require(r.seq >= 0, "sequence id must be >= 0, got {}", r.seq);
    require(r.pos >= 0, "position must be >= 0, got {} (sequence {})", r.pos, r.seq);
    ++new_cells[r.seq];
  }
  int32_t pages_needed = 0;
  for (const auto& [seq, count] : new_cells) {
    const int32_t have = n_cells(seq);
    if (int64_t(have) + count > config_.max_seq_tokens)
      fail(ErrorCode::cache_full, "KV cache full: sequence {} holds {} tokens, {} more exceed its limit of {}", seq,
           have, count, config_.max_seq_tokens);
    auto it = sequences_.find(seq);
    const int32_t pages_have = it == sequences_.end() ? 0 : int32_t(it->second.pages.size());
    const int32_t pages_want = (have + count + config_.page_tokens - 1) / config_.page_tokens;
    pages_needed += std::max(0, pages_want - pages_have);
  }
  if (pages_needed > pool_.n_free())
    fail(ErrorCode::cache_full, "KV cache full: the batch needs {} more pages of {} tokens, {} are free",
         pages_needed, config_.page_tokens, pool_.n_free());

  Placement placement;
  for (const auto& [seq, count] : new_cells) placement.previous_cells.emplace_back(seq, n_cells(seq));
  placement.slots.reserve(requests.size());
  for (const CellRequest& r : requests) {
    Sequence& s = sequences_[r.seq];
    if (s.cells % config_.page_tokens == 0 && size_t(s.cells / config_.page_tokens) == s.pages.size())
      s.pages.push_back(*pool_.acquire());  // cannot fail: counted above
    const int32_t slot = slot_of(s, s.cells);
    slot_pos_[size_t(slot)] = r.pos;
    placement.slots.push_back(slot);
    ++s.cells;
  }
  return placement;
}

void KVCache::undo(const Placement& placement) {
  for (const auto& [seq, cells] : placement.previous_cells) truncate(seq, cells);
}

void KVCache::truncate(int32_t seq, int32_t n_cells) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    require(n_cells == 0, "sequence {} holds no tokens; cannot keep {}", seq, n_cells);
    return;
  }
  Sequence& s = it->second;
  require(n_cells >= 0 && n_cells <= s.cells, "sequence {} holds {} tokens; cannot keep {}", seq, s.cells, n_cells);
  for (int32_t c = n_cells; c < s.cells; ++c) slot_pos_[size_t(slot_of(s, c))] = -1;
  s.cells = n_cells;
  const size_t pages_kept = size_t((n_cells + config_.page_tokens - 1) / config_.page_tokens);
  while (s.pages.size() > pages_kept) {
    pool_.release(s.pages.back());
    s.pages.pop_back();
  }
  if (s.cells == 0) sequences_.erase(it);
}

void KVCache::remove(int32_t seq) { truncate(seq, 0); }

void KVCache::clear() {
  while (!sequences_.empty()) remove(sequences_.begin()->first);
}

}  // namespace ember::kv
