// Reading GGUF files: memory-mapped, zero-copy, every field validated.
//
// Format: GGUF v2/v3 as specified in ggml's docs/gguf.md. A file is
//   header (magic "GGUF", version u32, tensor_count u64, kv_count u64)
//   kv_count metadata pairs (key: string, type: u32, value)
//   tensor_count tensor infos (name: string, n_dims: u32, dims: u64[n_dims], type: u32, offset: u64)
//   padding to `general.alignment` (default 32), then the tensor data section.
// All integers are little-endian. Strings are u64 length + bytes (no terminator).
//
// Every count, length, type, shape and offset is checked against the file size
// before it is used; a violation throws ember::Error(ErrorCode::malformed_file)
// whose message names the key or tensor and the byte offset of the problem.
// Version 1 (32-bit counts) and big-endian files throw ErrorCode::unsupported.
// The rules are listed in docs/gguf.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "quant/dtype.hpp"

namespace ember::gguf {

// Metadata value types, numbered as in the format.
enum class ValueType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
std::string_view value_type_name(ValueType type);

class Value;

// An array value; elements share one type, which may itself be `array` (nested).
struct Array {
  ValueType element_type = ValueType::u8;
  std::vector<Value> items;

  bool operator==(const Array& other) const;   // same element type and equal items
};

// One metadata value. Strings point into the mapped file (zero-copy) or into the
// owning buffer of a File built from memory; they live as long as the File.
class Value {
 public:
  Value() = default;
  static Value make_uint(ValueType type, uint64_t v);
  static Value make_int(ValueType type, int64_t v);
  static Value make_float(ValueType type, double v);
  static Value make_bool(bool v);
  static Value make_string(std::string_view v);
  static Value make_array(Array v);

  ValueType type() const { return type_; }
  bool is_integer() const;   // any of u8..i64
  bool is_float() const;     // f32 or f64
  bool is_string() const { return type_ == ValueType::string; }
  bool is_array() const { return type_ == ValueType::array; }

  // Typed access; a wrong type throws malformed_file naming `what` (usually the key).
  uint64_t as_uint(std::string_view what = "value") const;   // integer types, non-negative
  int64_t as_int(std::string_view what = "value") const;     // integer types that fit in i64
  double as_float(std::string_view what = "value") const;    // float or integer types
  bool as_bool(std::string_view what = "value") const;
  std::string_view as_string(std::string_view what = "value") const;
  const Array& as_array(std::string_view what = "value") const;

  // Same type and payload; floats compare by bit pattern (so NaN == NaN), arrays deeply.
  bool operator==(const Value& other) const;

 private:
  ValueType type_ = ValueType::u8;
  uint64_t bits_ = 0;          // integer/float/bool payload (floats stored as double bits)
  std::string_view string_;    // string payload
  std::shared_ptr<const Array> array_;  // array payload
};

struct KeyValue {
  std::string key;
  Value value;
};

// One tensor of the file. `data` points into the mapping; `n_bytes` bytes are valid.
// A tensor has 0 to 4 dimensions, each at least 1 (no dimensions: one element).
struct TensorInfo {
  std::string name;
  quant::DType type = quant::DType::f32;
  std::vector<int64_t> shape;   // GGUF order: shape[0] is the innermost (contiguous) dimension
  int64_t n_elements = 0;
  uint64_t offset = 0;          // from the start of the data section (a multiple of the alignment)
  uint64_t n_bytes = 0;
  const std::byte* data = nullptr;

  int64_t rows() const;         // product of shape[1..], 1 for a vector
  int64_t cols() const { return shape.empty() ? 1 : shape[0]; }
};

class File {
 public:
  // Memory-maps and parses `path`. Throws io (cannot open/map), malformed_file, or
  // unsupported (version 1, big-endian).
  static File open(const std::filesystem::path& path);
  // Parses an in-memory image (the File keeps its own copy). For tests and fuzzing.
  static File from_bytes(std::vector<std::byte> bytes, std::string name = "<memory>");
  // Parses an image owned by the caller, in place: the bytes must stay valid and
  // unchanged for as long as the File (and anything pointing into it) lives.
  static File from_view(std::span<const std::byte> bytes, std::string name = "<memory>");

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  const std::string& name() const;     // path or the name given to from_bytes
  uint32_t version() const;            // 2 or 3
  uint64_t alignment() const;          // general.alignment or 32
  uint64_t data_offset() const;        // byte offset of the tensor data section
  uint64_t file_size() const;
  std::span<const std::byte> bytes() const;   // the whole file

  // Metadata, in file order.
  std::span<const KeyValue> metadata() const;
  const Value* find(std::string_view key) const;             // nullptr when absent
  const Value& get(std::string_view key) const;              // throws malformed_file "missing required metadata key '...'"
  // Typed shortcuts; the *_or variants return `fallback` when the key is absent
  // and still throw when it is present with the wrong type.
  uint64_t get_uint(std::string_view key) const;
  uint64_t get_uint_or(std::string_view key, uint64_t fallback) const;
  int64_t get_int(std::string_view key) const;
  int64_t get_int_or(std::string_view key, int64_t fallback) const;
  double get_float(std::string_view key) const;
  double get_float_or(std::string_view key, double fallback) const;
  bool get_bool_or(std::string_view key, bool fallback) const;
  std::string_view get_string(std::string_view key) const;
  std::optional<std::string_view> find_string(std::string_view key) const;
  const Array& get_array(std::string_view key) const;

  // Tensors, in file order.
  std::span<const TensorInfo> tensors() const;
  const TensorInfo* find_tensor(std::string_view name) const;   // nullptr when absent
  const TensorInfo& tensor(std::string_view name) const;        // throws malformed_file "missing tensor '...'"

  struct Impl;   // opaque; defined in lib/gguf/file_impl.hpp for the parser

 private:
  explicit File(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Builds GGUF files (v3). Used by tests, fuzzing seeds and tools that write models.
// Metadata and tensors are written in the order added; tensor data is copied at
// add_tensor. Arguments are checked (duplicate key or tensor, shape, data size,
// array element types) with ErrorCode::invalid_argument. A copy of a Writer
// shares its contents with the original.
class Writer {
 public:
  // `alignment`: a nonzero power of two that fits in u32; when not 32 the writer adds the
  // `general.alignment` key itself. A `general.alignment` added by hand is
  // written as given and does not change the layout (tests use that to make
  // inconsistent files).
  explicit Writer(uint64_t alignment = 32);
  void add(std::string key, Value value);   // values may reference strings owned by the caller until write
  void add_uint32(std::string key, uint32_t v);
  void add_float32(std::string key, float v);
  void add_string(std::string key, std::string v);
  void add_bool(std::string key, bool v);
  void add_string_array(std::string key, const std::vector<std::string>& v);
  void add_float32_array(std::string key, const std::vector<float>& v);
  void add_int32_array(std::string key, const std::vector<int32_t>& v);
  // `data` must hold row_bytes(type, shape[0]) * rows bytes.
  void add_tensor(std::string name, quant::DType type, std::vector<int64_t> shape, std::span<const std::byte> data);
  // A tensor whose bytes are made when the file is written, so that a large model need
  // not be held in memory: write() and to_bytes() call `fill` once per call, in tensor
  // order, with a buffer of exactly the tensor's byte size to fill completely. An
  // exception from `fill` leaves the file incomplete (write into a temporary name).
  using Fill = std::function<void(std::span<std::byte> data)>;
  void add_deferred_tensor(std::string name, quant::DType type, std::vector<int64_t> shape, Fill fill);

  std::vector<std::byte> to_bytes() const;
  void write(const std::filesystem::path& path) const;   // throws io

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ember::gguf
