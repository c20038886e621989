// Buffers in host memory, shared by the reference and CPU backends.
#pragma once

#include <memory>
#include <span>

#include "backend/backend.hpp"
#include "backend/tensor.hpp"

namespace ember::backend {

// Owned, 64-byte aligned host memory. Throws out_of_memory when the allocation fails.
// Buffers of 1 MiB and more are mapped pages of their own (committed when first
// written), so that discard() can hand whole pages back to the system.
class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(size_t bytes);
  ~HostBuffer() override;
  size_t size() const override { return size_; }
  std::byte* host_data() override { return data_; }
  void discard(size_t offset, size_t bytes) override;

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // bytes mapped with mmap (0: from aligned_alloc)
};

// Host memory owned elsewhere (a mapped GGUF file), kept alive by `keep_alive`.
// Ops only read weights, so handing out a non-const pointer is safe by contract.
class HostView final : public Buffer {
 public:
  HostView(std::span<const std::byte> bytes, std::shared_ptr<const void> keep_alive)
      : bytes_(bytes), keep_alive_(std::move(keep_alive)) {}
  size_t size() const override { return bytes_.size(); }
  std::byte* host_data() override { return const_cast<std::byte*>(bytes_.data()); }
  // MADV_PAGEOUT (Linux 5.4+): clean file pages are dropped, anonymous ones go to
  // swap if there is any; the contents stay either way.
  void release_pages(size_t offset, size_t bytes) override;

 private:
  std::span<const std::byte> bytes_;
  std::shared_ptr<const void> keep_alive_;
};

// The memory half of a Backend for backends that compute in host memory (reference,
// CPU): buffers are HostBuffers, weights are referenced in place, copies are memcpy.
class HostBackend : public Backend {
 public:
  std::unique_ptr<Buffer> allocate(size_t bytes) override;
  std::shared_ptr<Buffer> wrap_host(std::span<const std::byte> bytes, std::shared_ptr<const void> keep_alive) override;
  void upload(const Tensor& dst, const void* src) override;
  void download(const Tensor& src, void* dst) override;
  // Row copies and decoding need no arithmetic of their own: both host backends share them.
  void kv_load(const Tensor& cache, const Tensor& slots, const Tensor& out) override;
  void copy_rows(const Tensor& tensor, const Tensor& src_rows, const Tensor& dst_rows) override;
};

}  // namespace ember::backend
