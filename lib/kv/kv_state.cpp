// KVCache state blobs: one sequence's tables and the rows of its cells, and back.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/fail.hpp"
#include "kv/kv_cache.hpp"

namespace ember::kv {
namespace {

// Little-endian blob helpers.
template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <typename T>
void put_vec(std::string& out, const std::vector<T>& v) {
  put<uint64_t>(out, v.size());
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
struct Reader {
  std::string_view data;
  size_t at = 0;
  void need(size_t n) const {
    if (data.size() - at < n)
      fail(ErrorCode::invalid_argument, "KV state: the blob ends early (byte {} of {})", at, data.size());
  }
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, data.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  template <typename T>
  std::vector<T> get_vec(size_t max_elems) {
    const auto n = get<uint64_t>();
    if (n > max_elems) fail(ErrorCode::invalid_argument, "KV state: a table of {} entries is too large", n);
    need(n * sizeof(T));
    std::vector<T> v(n);
    if (n != 0) std::memcpy(v.data(), data.data() + at, n * sizeof(T));
    at += n * sizeof(T);
    return v;
  }
};

constexpr uint32_t kBlobMagic = 0x31564B45;  // "EKV1"
// Ends a blob that carries the exact window's own blob after the cache's:
// [cache blob][window blob][u64 window blob bytes][u32 kWindowMagic].
constexpr uint32_t kWindowMagic = 0x31574B45;  // "EKW1"

// The storage tag of a blob: the key rows' type, and the value rows' in the high 16
// bits where they differ (k8v4), so blobs of one-type caches keep their old tag.
uint32_t storage_tag(const PoolConfig& pc) {
  const uint32_t k = uint32_t(pc.storage), v = uint32_t(pc.value_storage());
  return v == k ? k : k | v << 16;
}

// The cache's types by name, for errors ("kv_q8_g32", or keys/values where they differ).
std::string storage_name(const PoolConfig& pc) {
  const std::string k(quant::type_name(pc.storage));
  return pc.value_storage() == pc.storage ? k : k + "/" + std::string(quant::type_name(pc.value_storage()));
}

}  // namespace

// What a saved layer's tables must satisfy for the cache to use them: every live cell
// holds a token index below next_idx, each index at most once, at a position below
// next_idx (moved sinks sit before the window, never after the newest token); scores
// are finite; dropped_max is -1 or an index already given out.
void KVCache::check_cells(const Layer& l, int32_t next_idx, int layer) {
  std::vector<int32_t> seen;
  seen.reserve(size_t(l.live));
  for (size_t c = 0; c < l.pos.size(); ++c) {
    if (!std::isfinite(l.score[c]))
      fail(ErrorCode::invalid_argument, "KV state: layer {} cell {} has a score of {}", layer, c, l.score[c]);
    if (l.pos[c] < 0) continue;
    if (l.idx[c] < 0 || l.idx[c] >= next_idx || l.pos[c] >= next_idx)
      fail(ErrorCode::invalid_argument, "KV state: layer {} cell {} holds token {} at position {}, but only {} tokens exist",
           layer, c, l.idx[c], l.pos[c], next_idx);
    seen.push_back(l.idx[c]);
  }
  std::sort(seen.begin(), seen.end());
  if (std::adjacent_find(seen.begin(), seen.end()) != seen.end())
    fail(ErrorCode::invalid_argument, "KV state: layer {} holds a token twice", layer);
  if (l.dropped_max < -1 || l.dropped_max >= next_idx)
    fail(ErrorCode::invalid_argument, "KV state: layer {} dropped token {} of {}", layer, l.dropped_max, next_idx);
}

void KVCache::save(int32_t seq, std::string& out) const {
  save_own(seq, out);
  if (!exact_) return;
  const size_t start = out.size();
  exact_->save_own(seq, out);
  put<uint64_t>(out, uint64_t(out.size() - start));
  put<uint32_t>(out, kWindowMagic);
}

void KVCache::load(int32_t seq, std::string_view blob) {
  // A window saved with the blob is restored when this cache has one and skipped when
  // not; for a blob without one the window is refilled from this cache's rows.
  std::string_view window;
  if (blob.size() >= 12) {
    uint32_t magic = 0;
    uint64_t bytes = 0;
    std::memcpy(&magic, blob.data() + blob.size() - 4, 4);
    std::memcpy(&bytes, blob.data() + blob.size() - 12, 8);
    if (magic == kWindowMagic) {
      if (bytes > blob.size() - 12) fail(ErrorCode::invalid_argument, "KV state: bad exact-window record");
      window = blob.substr(blob.size() - 12 - bytes, bytes);
      blob = blob.substr(0, blob.size() - 12 - bytes);
    }
  }
  require(exact_ == nullptr || exact_->n_cells(seq) == 0, "KV state: sequence {} is not empty", seq);
  load_own(seq, blob);
  if (!exact_) return;
  try {
    if (!window.empty()) {
      exact_->load_own(seq, window);
      if (exact_->next_index(seq) != 0 && exact_->next_index(seq) != next_index(seq))
        fail(ErrorCode::invalid_argument, "KV state: the exact window ends at {}, the cache at {}",
             exact_->next_index(seq), next_index(seq));
      // Each layer of the window must hold the newest positions, without gaps.
      if (auto it = exact_->sequences_.find(seq); it != exact_->sequences_.end())
        for (const Layer& l : it->second.layers)
          if (newest_held(l, it->second.next_idx) < 0)
            fail(ErrorCode::invalid_argument, "KV state: the exact window does not hold the newest positions");
    }
    refill_exact(seq);
  } catch (...) {
    exact_->remove(seq);
    remove(seq);
    throw;
  }
}

void KVCache::save_own(int32_t seq, std::string& out) const {
  const PoolConfig& pc = pool_->config();
  put<uint32_t>(out, kBlobMagic);
  put<uint32_t>(out, storage_tag(pc));
  put<int64_t>(out, pc.k_width);
  put<int64_t>(out, pc.v_width);
  put<int32_t>(out, pc.page_tokens);
  put<int32_t>(out, config_.n_layer);
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    put<int32_t>(out, -1);
    return;
  }
  const Sequence& s = it->second;
  put<int32_t>(out, s.next_idx);
  const size_t k_row = quant::row_bytes(pc.storage, pc.k_width), v_row = quant::row_bytes(pc.value_storage(), pc.v_width);
  std::vector<std::byte> rows;
  for (int layer = 0; layer < config_.n_layer; ++layer) {
    const Layer& l = s.layers[size_t(layer)];
    put<int32_t>(out, l.live);
    put<int32_t>(out, l.dropped_max);
    put_vec(out, l.idx);
    put_vec(out, l.pos);
    put_vec(out, l.score);
    put_vec(out, s.sink_keys[size_t(layer)]);
    put_vec(out, s.sink_orig_pos[size_t(layer)]);
    for (int32_t page : l.pages) {
      for (const backend::Tensor* t : {&pool_->k(), &pool_->v()}) {
        const backend::Tensor part = t->slice_rows(int64_t(page) * pc.page_tokens, pc.page_tokens);
        rows.resize(size_t(pc.page_tokens) * (t == &pool_->k() ? k_row : v_row));
        be_.download(part, rows.data());
        out.append(reinterpret_cast<const char*>(rows.data()), rows.size());
      }
    }
  }
  std::vector<int32_t> moved;
  for (const auto& [layer, cell] : s.moved) moved.push_back(layer), moved.push_back(cell);
  put_vec(out, moved);
}

void KVCache::load_own(int32_t seq, std::string_view blob) {
  require(n_cells(seq) == 0 && !sequences_.count(seq), "KV state: sequence {} is not empty", seq);
  const PoolConfig& pc = pool_->config();
  Reader r{blob};
  if (r.get<uint32_t>() != kBlobMagic) fail(ErrorCode::invalid_argument, "KV state: not a KV-cache blob");
  const auto storage = r.get<uint32_t>();
  const auto k_width = r.get<int64_t>(), v_width = r.get<int64_t>();
  const auto page_tokens_saved = r.get<int32_t>(), n_layer = r.get<int32_t>();
  if (storage != storage_tag(pc) || k_width != pc.k_width || v_width != pc.v_width ||
      page_tokens_saved != pc.page_tokens || n_layer != config_.n_layer)
    fail(ErrorCode::invalid_argument,
         "KV state: saved with storage {}, rows {}/{}, pages of {}, {} layers; this cache has {}, {}/{}, {}, {}",
         storage, k_width, v_width, page_tokens_saved, n_layer, storage_name(pc), pc.k_width, pc.v_width,
         pc.page_tokens, config_.n_layer);
  const auto next_idx = r.get<int32_t>();
  if (next_idx < 0) return;
  const size_t k_row = quant::row_bytes(pc.storage, pc.k_width), v_row = quant::row_bytes(pc.value_storage(), pc.v_width);
  const size_t limit = size_t(pc.n_pages) * size_t(pc.page_tokens);
  Sequence s;
  s.next_idx = next_idx;
  s.layers.resize(size_t(n_layer));
  s.sink_keys.resize(size_t(n_layer));
  s.sink_orig_pos.resize(size_t(n_layer));
  try {
    for (int layer = 0; layer < n_layer; ++layer) {
      Layer& l = s.layers[size_t(layer)];
      l.live = r.get<int32_t>();
      l.dropped_max = r.get<int32_t>();
      l.idx = r.get_vec<int32_t>(limit);
      l.pos = r.get_vec<int32_t>(limit);
      l.score = r.get_vec<float>(limit);
      s.sink_keys[size_t(layer)] = r.get_vec<float>(size_t(1) << 26);
      s.sink_orig_pos[size_t(layer)] = r.get_vec<int32_t>(1 << 20);
      int32_t live = 0;
      for (int32_t p : l.pos) live += p >= 0;
      if (l.pos.size() != l.idx.size() || l.score.size() != l.idx.size() || live != l.live ||
          s.sink_keys[size_t(layer)].size() != s.sink_orig_pos[size_t(layer)].size() * size_t(pc.k_width))
        fail(ErrorCode::invalid_argument, "KV state: inconsistent tables in layer {}", layer);
      check_cells(l, next_idx, layer);
      const auto n_pages = int32_t((l.pos.size() + size_t(pc.page_tokens) - 1) / size_t(pc.page_tokens));
      r.need(size_t(n_pages) * size_t(pc.page_tokens) * (k_row + v_row));
      l.pages = pool_->acquire(n_pages);
      for (int32_t page : l.pages) {
        for (const backend::Tensor* t : {&pool_->k(), &pool_->v()}) {
          const backend::Tensor part = t->slice_rows(int64_t(page) * pc.page_tokens, pc.page_tokens);
          const size_t bytes = size_t(pc.page_tokens) * (t == &pool_->k() ? k_row : v_row);
          r.need(bytes);
          be_.upload(part, blob.data() + r.at);
          r.at += bytes;
        }
      }
    }
    const auto moved = r.get_vec<int32_t>(1 << 24);
    if (moved.size() % 2 != 0) fail(ErrorCode::invalid_argument, "KV state: bad sink record");
    for (size_t i = 0; i + 1 < moved.size(); i += 2) {
      if (moved[i] < 0 || moved[i] >= n_layer || moved[i + 1] < 0 ||
          size_t(moved[i + 1]) >= s.layers[size_t(moved[i])].pos.size())
        fail(ErrorCode::invalid_argument, "KV state: bad sink record");
      s.moved.emplace_back(moved[i], moved[i + 1]);
    }
    if (r.at != blob.size()) fail(ErrorCode::invalid_argument, "KV state: {} unexpected trailing bytes", blob.size() - r.at);
  } catch (...) {
    release_all(s);
    throw;
  }
  sequences_[seq] = std::move(s);
}

}  // namespace ember::kv
