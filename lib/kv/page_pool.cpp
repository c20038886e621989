#include "kv/page_pool.hpp"

#include "common/fail.hpp"

namespace ember::kv {

PagePool::PagePool(int32_t n_pages) {
  require(n_pages > 0, "KV cache: the page pool needs at least one page, got {}", n_pages);
  refcount_.assign(size_t(n_pages), 0);
  free_.reserve(size_t(n_pages));
  for (int32_t p = n_pages - 1; p >= 0; --p) free_.push_back(p);
}

int32_t PagePool::refcount(int32_t page) const {
  if (page < 0 || page >= n_pages()) fail(ErrorCode::internal, "page {} outside the pool", page);
  return refcount_[size_t(page)];
}

std::optional<int32_t> PagePool::acquire() {
  if (free_.empty()) return std::nullopt;
  const int32_t page = free_.back();
  free_.pop_back();
  refcount_[size_t(page)] = 1;
  return page;
}

void PagePool::retain(int32_t page) {
  if (refcount(page) <= 0) fail(ErrorCode::internal, "retain of free page {}", page);
  ++refcount_[size_t(page)];
}

void PagePool::release(int32_t page) {
  if (refcount(page) <= 0) fail(ErrorCode::internal, "release of free page {}", page);
  if (--refcount_[size_t(page)] == 0) free_.push_back(page);
}

}  // namespace ember::kv
