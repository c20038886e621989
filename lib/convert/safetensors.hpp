// Reading .safetensors files: memory-mapped, zero-copy, every field validated.
//
// Format (huggingface/safetensors): an unsigned little-endian 64-bit header size N, then
// N bytes of JSON: an object whose members are tensors,
//   "name": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}
// plus an optional "__metadata__" object of strings; then the data, at offsets relative
// to the end of the header. Shapes are row-major (the last dimension is contiguous).
// Checked: the header fits in the file, the JSON, each dtype, shape and offset, that
// end - begin is the shape's byte size and that [begin, end) lies in the file.
// Violations throw ember::Error(ErrorCode::malformed_file) naming the file and tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/mapped_file.hpp"

namespace ember::convert {

enum class StDType { f64, f32, f16, bf16, i64, i32, i16, i8, u8, boolean, other };

struct StTensor {
  std::string name;
  std::string dtype_name;          // as written ("BF16", "F32", ...)
  StDType dtype = StDType::other;
  std::vector<int64_t> shape;      // row-major, outermost first
  int64_t n_elements = 1;
  const std::byte* data = nullptr;
  uint64_t n_bytes = 0;
};

class SafetensorsFile {
 public:
  // Maps and parses `path`; throws io or malformed_file.
  explicit SafetensorsFile(const std::string& path);
  // Parses an image owned by the caller (`name` in messages); the bytes must outlive the
  // object. For tests and fuzzing.
  SafetensorsFile(std::span<const std::byte> bytes, std::string name);

  const std::string& path() const { return path_; }
  const std::vector<StTensor>& tensors() const { return tensors_; }   // in header order

 private:
  void parse(std::span<const std::byte> bytes);

  std::string path_;
  MappedFile map_;
  std::vector<StTensor> tensors_;
};

// Bytes per element of a dtype (0 for `other`).
size_t st_dtype_size(StDType t);

}  // namespace ember::convert
