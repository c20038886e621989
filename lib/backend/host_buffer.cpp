#include "backend/host_buffer.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "common/fail.hpp"
#include "quant/quant.hpp"

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
