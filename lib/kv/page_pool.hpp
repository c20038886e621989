// Fixed pool of KV-cache pages with reference counts.
//
// A page holds `page_tokens` consecutive cells of one sequence in every layer.
// Pages are reference-counted so that sequences can later share a prefix and
// copy on write; a page returns to the free list when its count drops to zero.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace ember::kv {

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

}  // namespace ember::kv
