// KV-cache pages: a fixed pool of reference-counted pages and the storage behind them.
//
// A page holds `page_tokens` consecutive cells of ONE layer of one sequence: the
// key row and the value row of each cell. All layers draw from the same pool, so a
// sliding-window layer that frees its old pages hands them to any other layer or
// session. Pages are reference-counted so that forked sessions share a prefix and
// copy a page only when they write into it; a page returns to the free list when
// its count drops to zero.
//
// Storage: one K tensor and one V tensor of [n_pages * page_tokens, width] rows in
// the storage type; page p owns rows [p * page_tokens, (p + 1) * page_tokens).
// Pages are allocated and released under a mutex: several sessions on different
// threads share one Pool. Each page is written only by the session holding it
// alone, so the rows themselves need no lock.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "backend/backend.hpp"

namespace ember::kv {

// The allocator alone (not thread-safe; Pool wraps it in a mutex).
class PagePool {
 public:
  explicit PagePool(int32_t n_pages);

  int32_t n_pages() const { return int32_t(refcount_.size()); }
  int32_t n_free() const { return int32_t(free_.size()); }
  int32_t refcount(int32_t page) const;

  // A free page with count 1, or nullopt when none is left.
  std::optional<int32_t> acquire();
  void retain(int32_t page);
  void release(int32_t page);

 private:
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;  // a stack; the lowest ids are handed out first
};

// The storage types of a pool's key rows and value rows.
struct KVTypes {
  quant::DType k = quant::DType::f16, v = quant::DType::f16;
  auto operator<=>(const KVTypes&) const = default;
};

struct PoolConfig {
  int64_t k_width = 0;                       // n_head_kv * key head dim (the same in every layer)
  int64_t v_width = 0;                       // n_head_kv * value head dim
  quant::DType storage = quant::DType::f16;  // any quant::is_kv_storage_type: the key rows'
  std::optional<quant::DType> v_storage;     // the value rows' when it differs (same group size)
  int32_t page_tokens = 16;                  // cells per page, > 0
  int32_t n_pages = 0;                       // pages in the pool, > 0

  quant::DType value_storage() const { return v_storage.value_or(storage); }
  KVTypes types() const { return {storage, value_storage()}; }
};

// Memory figures of a pool (all layers, all sessions).
struct PoolStats {
  int32_t page_tokens = 0;
  int32_t pages_total = 0, pages_used = 0, pages_free = 0;
  size_t page_bytes = 0;  // K and V rows of one page
  size_t bytes_total() const { return size_t(pages_total) * page_bytes; }
  size_t bytes_used() const { return size_t(pages_used) * page_bytes; }
};

class Pool {
 public:
  // Reserves the storage on `backend` (host backends commit memory only when a page
  // is first written). Throws invalid_argument for a bad configuration.
  Pool(backend::Backend& backend, const PoolConfig& config);

  const PoolConfig& config() const { return config_; }
  size_t page_bytes() const;
  PoolStats stats() const;
  int32_t refcount(int32_t page) const;

  // `n` pages at once, or cache_full (and nothing taken) when fewer are free.
  std::vector<int32_t> acquire(int32_t n);
  void retain(int32_t page);
  void release(int32_t page);
  // Hands the memory of every free page that was written since the last trim back
  // to the backend's buffer (Buffer::discard), so that the pool's resident memory
  // follows the pages in use. Called when a sequence ends. Returns the pages trimmed.
  int32_t trim();

  const backend::Tensor& k() const { return k_; }
  const backend::Tensor& v() const { return v_; }

 private:
  PoolConfig config_;
  mutable std::mutex mutex_;
  PagePool pages_;
  std::unique_ptr<backend::Buffer> buffer_;
  backend::Tensor k_, v_;
  std::vector<uint8_t> dirty_;  // [n_pages] acquired since the page was last trimmed
};

}  // namespace ember::kv
