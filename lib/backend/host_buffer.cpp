#include "backend/host_buffer.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <new>

#include "common/fail.hpp"
#include "quant/quant.hpp"

namespace ember::backend {

namespace {
constexpr size_t kMapThreshold = size_t(1) << 20;
constexpr size_t kHugePage = size_t(2) << 20;
size_t os_page() {
  static const size_t page = [] {
    const long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? size_t(p) : size_t(4096);
  }();
  return page;
}
}  // namespace

HostBuffer::HostBuffer(size_t bytes) : size_(bytes) {
  if (bytes >= kMapThreshold) {
    const size_t rounded = (bytes + os_page() - 1) / os_page() * os_page();
    void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail(ErrorCode::out_of_memory, "cannot reserve {} bytes of host memory", bytes);
    data_ = static_cast<std::byte*>(p);
    mapped_ = rounded;
#if defined(MADV_HUGEPAGE)
    // Transparent huge pages where the system offers them on request: the KV cache and
    // activations are streamed, and 4 KiB pages stop the hardware prefetchers at every
    // page and cost a TLB miss each. Advice only; its failure changes nothing.
    if (rounded >= kHugePage) madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return;
  }
  constexpr size_t kAlign = 64;
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  data_ = static_cast<std::byte*>(std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded));
  if (!data_) fail(ErrorCode::out_of_memory, "cannot allocate {} bytes of host memory", bytes);
}

HostBuffer::~HostBuffer() {
  if (mapped_ > 0)
    munmap(data_, mapped_);
  else
    std::free(data_);
}

void HostBuffer::discard(size_t offset, size_t bytes) {
  if (mapped_ == 0 || offset >= size_) return;
  const size_t page = os_page();
  const size_t first = (offset + page - 1) / page * page;               // whole pages inside the range only
  const size_t last = std::min(offset + bytes, size_) / page * page;
  if (last > first) madvise(data_ + first, last - first, MADV_DONTNEED);  // zero-filled when touched again
}

void HostView::release_pages(size_t offset, size_t bytes) {
#if defined(__linux__)
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const auto base = reinterpret_cast<uintptr_t>(bytes_.data());
  const uintptr_t first = (base + offset + page - 1) / page * page;
  const uintptr_t last = (base + std::min(offset + bytes, bytes_.size())) / page * page;
  // Errors (older kernels: EINVAL) leave the pages where they are, which is correct too.
  if (last > first) (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_PAGEOUT);
#endif
}

std::unique_ptr<Buffer> HostBackend::allocate(size_t bytes) { return std::make_unique<HostBuffer>(bytes); }

std::shared_ptr<Buffer> HostBackend::wrap_host(std::span<const std::byte> bytes, std::shared_ptr<const void> keep_alive) {
  return std::make_shared<HostView>(bytes, std::move(keep_alive));
}

void HostBackend::upload(const Tensor& dst, const void* src) {
  if (!dst.contiguous()) fail(ErrorCode::internal, "upload into a strided tensor");
  std::memcpy(dst.row_ptr(0), src, dst.bytes());
}

void HostBackend::download(const Tensor& src, void* dst) {
  if (!src.contiguous()) fail(ErrorCode::internal, "download of a strided tensor");
  std::memcpy(dst, src.row_ptr(0), src.bytes());
}

void HostBackend::kv_load(const Tensor& cache, const Tensor& slots, const Tensor& out) {
  for (int64_t t = 0; t < out.rows; ++t) {
    const int32_t slot = *slots.row_ptr<int32_t>(t);
    if (slot < 0 || slot >= cache.rows)
      fail(ErrorCode::invalid_argument, "kv_load: slot {} outside [0, {})", slot, cache.rows);
    quant::dequantize_row(cache.type, cache.row_ptr(slot), out.row_ptr<float>(t), out.cols);
  }
}

void HostBackend::copy_rows(const Tensor& tensor, const Tensor& src_rows, const Tensor& dst_rows) {
  const size_t bytes = quant::row_bytes(tensor.type, tensor.cols);
  for (int64_t i = 0; i < src_rows.rows; ++i) {
    const int32_t from = *src_rows.row_ptr<int32_t>(i), to = *dst_rows.row_ptr<int32_t>(i);
    if (from < 0 || from >= tensor.rows || to < 0 || to >= tensor.rows)
      fail(ErrorCode::invalid_argument, "copy_rows: row {} -> {} outside [0, {})", from, to, tensor.rows);
    if (from != to) std::memcpy(tensor.row_ptr(to), tensor.row_ptr(from), bytes);
  }
}

}  // namespace ember::backend
