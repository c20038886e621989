#include "backend/host_buffer.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "common/fail.hpp"

namespace ember::backend {

HostBuffer::HostBuffer(size_t bytes) : size_(bytes) {
  constexpr size_t kAlign = 64;
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  data_ = static_cast<std::byte*>(std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded));
  if (!data_) fail(ErrorCode::out_of_memory, "cannot allocate {} bytes of host memory", bytes);
}

HostBuffer::~HostBuffer() { std::free(data_); }

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

}  // namespace ember::backend
