// Buffers owned by a backend and 2-D tensor views on them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/dtype.hpp"

namespace ember::backend {

using quant::DType;

// A block of memory owned by a backend (host RAM for the CPU backends, device
// memory for CUDA). Ops only ever see Buffers, never pointers the caller owns.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual size_t size() const = 0;
  // Host address of the memory when the host can address it (CPU backends), else nullptr.
  virtual std::byte* host_data() = 0;
  // Device address for backends that need one (CUDA), else nullptr.
  virtual void* device_data() { return nullptr; }
  // The bytes [offset, offset + bytes) are no longer needed: their contents become
  // undefined and the memory behind them may go back to the system until it is
  // written again. A hint; buffers that cannot return memory ignore it.
  virtual void discard(size_t offset, size_t bytes) {}
  // The bytes [offset, offset + bytes) will not be read for a long time: the system
  // may reclaim the memory behind them, their contents kept (read back from the file
  // or swap when touched again). A hint; buffers that cannot act on it ignore it.
  virtual void release_pages(size_t offset, size_t bytes) {}
};

// A 2-D view of a Buffer: `rows` rows of `cols` values of `type`, consecutive rows
// `row_stride` bytes apart, starting `offset` bytes into the buffer. For block
// formats `cols` is a multiple of the block size. Shapes are written
// [rows, cols] in comments, row-major.
struct Tensor {
  Buffer* buffer = nullptr;
  size_t offset = 0;
  DType type = DType::f32;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_stride = 0;
  // 0: rows in the format's own block layout. Other values: a backend's private
  // layout of matmul weights (Backend::prepare_weight), in which rows come in groups
  // of kLayoutGroupRows whose bytes are interleaved; only that backend's matmul reads
  // it, slices must keep whole groups, and every other op rejects it.
  uint8_t layout = 0;
  static constexpr int64_t kLayoutGroupRows = 8;

  size_t row_bytes() const { return quant::row_bytes(type, cols); }
  size_t bytes() const { return rows == 0 ? 0 : size_t(rows - 1) * row_stride + row_bytes(); }
  bool contiguous() const { return rows <= 1 || row_stride == row_bytes(); }
  bool empty() const { return buffer == nullptr; }

  // Rows [first, first + count).
  Tensor slice_rows(int64_t first, int64_t count) const;
  // Columns [first, first + count) of a plain (non-block) type.
  Tensor slice_cols(int64_t first, int64_t count) const;
  // Same bytes seen as [new_rows, new_cols]; the tensor must be contiguous.
  Tensor reshape(int64_t new_rows, int64_t new_cols) const;

  // Host pointer to row r (CPU-side code only; nullptr for device memory).
  template <typename T = std::byte>
  T* row_ptr(int64_t r) const {
    std::byte* base = buffer ? buffer->host_data() : nullptr;
    return base ? reinterpret_cast<T*>(base + offset + size_t(r) * row_stride) : nullptr;
  }
};

// A contiguous [rows, cols] tensor covering bytes [offset, ...) of `buffer`.
Tensor make_tensor(Buffer& buffer, size_t offset, DType type, int64_t rows, int64_t cols);

}  // namespace ember::backend
