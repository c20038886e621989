// The paged KV cache: per-layer key and value storage on a backend, a page pool,
// and one page table per sequence.
//
// Storage per layer: K and V tensors of [n_pages * page_tokens, n_head_kv * head_dim]
// in the storage type (F16 or F32). Cell c of a sequence lives in slot
//   page_table[c / page_tokens] * page_tokens + c % page_tokens.
// The host keeps the authoritative tables (pages, cell counts, the position stored
// in each slot); the model uploads the parts a forward pass needs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.hpp"
#include "kv/page_pool.hpp"

namespace ember::kv {

struct CacheConfig {
  int n_layer = 0;
  int64_t k_width = 0;             // n_head_kv * key head dim
  int64_t v_width = 0;             // n_head_kv * value head dim
  quant::DType storage = quant::DType::f16;  // F16 or F32
  int32_t page_tokens = 16;        // cells per page, > 0
  int32_t max_tokens = 4096;       // total cells over all sequences (rounded up to whole pages)
  int32_t max_seq_tokens = 4096;   // cells one sequence may hold
};

// One new token for the cache: the sequence it extends and its position.
struct CellRequest {
  int32_t seq = 0;
  int32_t pos = 0;
};

// Where a batch's tokens went; enough to undo it.
struct Placement {
  std::vector<int32_t> slots;                   // per token
  std::vector<std::pair<int32_t, int32_t>> previous_cells;  // (seq, cells before) per touched sequence
};

class KVCache {
 public:
  KVCache(backend::Backend& backend, const CacheConfig& config);

  const CacheConfig& config() const { return config_; }
  int32_t n_slots() const { return pool_.n_pages() * config_.page_tokens; }
  int32_t free_cells() const { return pool_.n_free() * config_.page_tokens; }
  size_t bytes() const;

  // Cells held by a sequence (0 for an unknown id).
  int32_t n_cells(int32_t seq) const;
  std::span<const int32_t> pages(int32_t seq) const;
  // Position stored in each slot, -1 when empty: [n_slots].
  std::span<const int32_t> slot_positions() const { return slot_pos_; }
  // Sequences currently holding cells.
  std::vector<int32_t> sequences() const;

  // Appends one cell per request, in order, to its sequence. Throws cache_full
  // (or invalid_argument for a negative seq/pos) leaving the cache unchanged.
  Placement place(std::span<const CellRequest> requests);
  // Undoes a placement (used when the forward pass that followed it failed).
  void undo(const Placement& placement);

  // Keeps the first `n_cells` cells of a sequence and frees the rest (rewind).
  void truncate(int32_t seq, int32_t n_cells);
  void remove(int32_t seq);
  void clear();

  backend::Tensor k(int layer) const { return k_[size_t(layer)]; }
  backend::Tensor v(int layer) const { return v_[size_t(layer)]; }

 private:
  struct Sequence {
    std::vector<int32_t> pages;
    int32_t cells = 0;
  };
  int32_t slot_of(const Sequence& s, int32_t cell) const;

  CacheConfig config_;
  PagePool pool_;
  std::map<int32_t, Sequence> sequences_;
  std::vector<int32_t> slot_pos_;
  std::vector<std::unique_ptr<backend::Buffer>> buffers_;
  std::vector<backend::Tensor> k_, v_;
};

}  // namespace ember::kv
