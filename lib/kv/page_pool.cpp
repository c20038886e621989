#include "kv/page_pool.hpp"

#include "common/fail.hpp"
#include "quant/dtype.hpp"

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

namespace {
int32_t checked_pages(const PoolConfig& c) {
  require(c.page_tokens > 0 && c.page_tokens <= 4096, "KV cache: page_tokens must be in [1, 4096], got {}",
          c.page_tokens);
  require(c.n_pages > 0, "KV cache: the pool needs at least one page, got {}", c.n_pages);
  require(c.k_width > 0 && c.v_width > 0, "KV cache: empty row width");
  for (const quant::DType t : {c.storage, c.value_storage()})
    require(quant::is_kv_storage_type(t), "KV cache: {} is not a KV storage type", quant::type_name(t));
  const auto& info = quant::type_info(c.storage);
  const auto& v_info = quant::type_info(c.value_storage());
  require(c.k_width % info.block_elems == 0 && c.v_width % v_info.block_elems == 0,
          "KV cache: rows of {}/{} values are not whole groups of {}/{} for {}/{}", c.k_width, c.v_width,
          info.block_elems, v_info.block_elems, info.name, v_info.name);
  return c.n_pages;
}
}  // namespace

Pool::Pool(backend::Backend& backend, const PoolConfig& config) : config_(config), pages_(checked_pages(config)) {
  for (const quant::DType t : {config.storage, config.value_storage()})
    for (const backend::Op op : {backend::Op::kv_store, backend::Op::attention})
      if (!backend.supports(op, t))
        fail(ErrorCode::unsupported, "KV cache: the {} backend cannot store or attend over {} rows", backend.name(),
             quant::type_name(t));
  const int64_t rows = int64_t(config.n_pages) * config.page_tokens;
  const size_t k_bytes = quant::row_bytes(config.storage, config.k_width) * size_t(rows);
  const size_t v_bytes = quant::row_bytes(config.value_storage(), config.v_width) * size_t(rows);
  buffer_ = backend.allocate(k_bytes + v_bytes);
  k_ = backend::make_tensor(*buffer_, 0, config.storage, rows, config.k_width);
  v_ = backend::make_tensor(*buffer_, k_bytes, config.value_storage(), rows, config.v_width);
  dirty_.assign(size_t(config.n_pages), 0);
}

size_t Pool::page_bytes() const {
  return (quant::row_bytes(config_.storage, config_.k_width) +
          quant::row_bytes(config_.value_storage(), config_.v_width)) *
         size_t(config_.page_tokens);
}

PoolStats Pool::stats() const {
  std::lock_guard lock(mutex_);
  PoolStats s;
  s.page_tokens = config_.page_tokens;
  s.pages_total = pages_.n_pages();
  s.pages_free = pages_.n_free();
  s.pages_used = s.pages_total - s.pages_free;
  s.page_bytes = page_bytes();
  return s;
}

int32_t Pool::refcount(int32_t page) const {
  std::lock_guard lock(mutex_);
  return pages_.refcount(page);
}

std::vector<int32_t> Pool::acquire(int32_t n) {
  std::lock_guard lock(mutex_);
  if (n > pages_.n_free())
    fail(ErrorCode::cache_full, "KV cache full: {} more pages of {} tokens are needed, {} of {} are free", n,
         config_.page_tokens, pages_.n_free(), pages_.n_pages());
  std::vector<int32_t> out;
  out.reserve(size_t(std::max(n, 0)));
  for (int32_t i = 0; i < n; ++i) {
    out.push_back(*pages_.acquire());
    dirty_[size_t(out.back())] = 1;
  }
  return out;
}

int32_t Pool::trim() {
  std::lock_guard lock(mutex_);
  const size_t k_page = quant::row_bytes(config_.storage, config_.k_width) * size_t(config_.page_tokens);
  const size_t v_page = quant::row_bytes(config_.value_storage(), config_.v_width) * size_t(config_.page_tokens);
  int32_t trimmed = 0;
  // Runs of consecutive free dirty pages are contiguous in K and in V: one discard each.
  for (int32_t p = 0; p < pages_.n_pages();) {
    if (!dirty_[size_t(p)] || pages_.refcount(p) != 0) {
      ++p;
      continue;
    }
    int32_t end = p;
    while (end < pages_.n_pages() && dirty_[size_t(end)] && pages_.refcount(end) == 0) dirty_[size_t(end++)] = 0;
    buffer_->discard(k_.offset + size_t(p) * k_page, size_t(end - p) * k_page);
    buffer_->discard(v_.offset + size_t(p) * v_page, size_t(end - p) * v_page);
    trimmed += end - p;
    p = end;
  }
  return trimmed;
}

void Pool::retain(int32_t page) {
  std::lock_guard lock(mutex_);
  pages_.retain(page);
}

void Pool::release(int32_t page) {
  std::lock_guard lock(mutex_);
  pages_.release(page);
}

}  // namespace ember::kv
