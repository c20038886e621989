#include "backend/tensor.hpp"

#include "common/fail.hpp"

namespace ember::backend {

Tensor Tensor::slice_rows(int64_t first, int64_t count) const {
  if (first < 0 || count < 0 || first + count > rows)
    fail(ErrorCode::internal, "slice_rows [{}, {}) outside {} rows", first, first + count, rows);
  if (layout != 0 && (first % kLayoutGroupRows != 0 || (count % kLayoutGroupRows != 0 && first + count != rows)))
    fail(ErrorCode::internal, "slice_rows [{}, {}) cuts a group of {} rows of a repacked weight", first, first + count,
         kLayoutGroupRows);
  Tensor t = *this;
  t.offset += size_t(first) * row_stride;
  t.rows = count;
  return t;
}

Tensor Tensor::slice_cols(int64_t first, int64_t count) const {
  const auto& info = quant::type_info(type);
  if (info.block_elems != 1) fail(ErrorCode::internal, "slice_cols on block type {}", info.name);
  if (first < 0 || count < 0 || first + count > cols)
    fail(ErrorCode::internal, "slice_cols [{}, {}) outside {} columns", first, first + count, cols);
  Tensor t = *this;
  t.offset += size_t(first) * info.block_bytes;
  t.cols = count;
  return t;
}

Tensor Tensor::reshape(int64_t new_rows, int64_t new_cols) const {
  if (layout != 0) fail(ErrorCode::internal, "reshape of a repacked weight");
  if (!contiguous()) fail(ErrorCode::internal, "reshape of a strided tensor");
  if (new_rows * new_cols != rows * cols)
    fail(ErrorCode::internal, "reshape [{}, {}] -> [{}, {}] changes the element count", rows, cols, new_rows,
         new_cols);
  Tensor t = *this;
  t.rows = new_rows;
  t.cols = new_cols;
  t.row_stride = quant::row_bytes(type, new_cols);
  return t;
}

Tensor make_tensor(Buffer& buffer, size_t offset, DType type, int64_t rows, int64_t cols) {
  Tensor t;
  t.buffer = &buffer;
  t.offset = offset;
  t.type = type;
  t.rows = rows;
  t.cols = cols;
  t.row_stride = quant::row_bytes(type, cols);
  if (offset + t.bytes() > buffer.size())
    fail(ErrorCode::internal, "tensor [{}, {}] at offset {} exceeds buffer of {} bytes", rows, cols, offset,
         buffer.size());
  return t;
}

}  // namespace ember::backend
