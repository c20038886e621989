// The GGUF parser: turns the bytes of a file into File::Impl, checking every
// count, length, type, shape and offset against the file before using it.
//
// Order of checks follows the file: header, metadata (key, type, value), then the
// tensor infos, then the placement of each tensor's data. A count is compared with
// the bytes left *before* anything is reserved for it, using the smallest encoding
// one element can have, so a forged count cannot make us allocate more than a
// small multiple of the file size.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>

#include "common/fail.hpp"
#include "gguf/byte_order.hpp"
#include "gguf/file_impl.hpp"

namespace ember::gguf {
namespace {

constexpr uint32_t kMaxDims = 4;            // ggml tensors have at most 4 dimensions
constexpr int kMaxArrayDepth = 64;          // arrays of arrays; bounds the parser's recursion
constexpr uint32_t kLastValueType = 12;     // f64
// Smallest encodings, used to bound counts before allocating.
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;       // empty key, type, one-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims = 0, type, offset
constexpr uint64_t kStringHeaderBytes = 8;
constexpr uint64_t kArrayHeaderBytes = 4 + 8;            // element type, length

uint64_t min_value_bytes(ValueType type) {
  if (type == ValueType::string) return kStringHeaderBytes;
  if (type == ValueType::array) return kArrayHeaderBytes;
  return detail::scalar_size(uint32_t(type));
}

// What the parser is looking at, kept cheap (no strings built) and turned into
// words only when a check fails.
struct Where {
  enum Section { header, metadata, tensor } section = header;
  uint64_t index = 0;
  std::string_view name;   // key or tensor name once read
};

class Parser {
 public:
  explicit Parser(File::Impl& impl) : impl_(impl), data_(impl.bytes.data()), size_(impl.bytes.size()) {}

  void run() {
    read_header();
    read_metadata();
    read_alignment();
    read_tensor_infos();
    place_tensors();
  }

 private:
  // --- failures ---------------------------------------------------------------

  std::string where() const {
    switch (where_.section) {
      case Where::header: return "header";
      case Where::metadata:
        return where_.name.empty() ? fmt::format("metadata entry #{}", where_.index)
                                   : fmt::format("metadata key '{}'", where_.name);
      case Where::tensor:
        return where_.name.empty() ? fmt::format("tensor info #{}", where_.index)
                                   : fmt::format("tensor '{}'", where_.name);
    }
    return "?";
  }

  template <typename... Args>
  [[noreturn]] void bad(uint64_t offset, fmt::format_string<Args...> format, Args&&... args) const {
    fail(ErrorCode::malformed_file, "{}: {} (in {}, at byte offset {})", impl_.name,
         fmt::format(format, std::forward<Args>(args)...), where(), offset);
  }

  // --- primitive reads ----------------------------------------------------------

  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining())
      bad(pos_, "file truncated: {} needs {} bytes but {} remain (file size {})", what, n, remaining(), size_);
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    const T v = detail::load_le<T>(data_ + pos_);
    pos_ += sizeof(T);
    return v;
  }

  std::string_view read_string(std::string_view what) {
    const uint64_t at = pos_;
    const uint64_t length = read<uint64_t>(what);
    if (length > remaining())
      bad(at, "{} of {} bytes runs past the end of the file ({} bytes remain)", what, length, remaining());
    const std::string_view s(reinterpret_cast<const char*>(data_ + pos_), size_t(length));
    pos_ += length;
    return s;
  }

  ValueType read_value_type(std::string_view what) {
    const uint64_t at = pos_;
    const uint32_t raw = read<uint32_t>(what);
    if (raw > kLastValueType) bad(at, "unknown {} {}", what, raw);
    return ValueType(raw);
  }

  // --- sections -----------------------------------------------------------------

  void read_header() {
    need(4, "magic");
    if (std::memcmp(data_, "GGUF", 4) != 0)
      bad(0, "bad magic {:02x} {:02x} {:02x} {:02x}, expected 'GGUF' (47 47 55 46); not a GGUF file",
          uint8_t(data_[0]), uint8_t(data_[1]), uint8_t(data_[2]), uint8_t(data_[3]));
    pos_ = 4;
    const uint32_t version = read<uint32_t>("version");
    if (version == 1)
      fail(ErrorCode::unsupported,
           "{}: GGUF version 1 (32-bit counts) is not supported; convert the model again with a current tool",
           impl_.name);
    if (version != 2 && version != 3) {
      const uint32_t swapped = (version >> 24) | ((version >> 8) & 0xff00) | ((version << 8) & 0xff0000) | (version << 24);
      if (swapped >= 1 && swapped <= 3)
        fail(ErrorCode::unsupported, "{}: big-endian GGUF files are not supported (version {} byte-swapped)",
             impl_.name, swapped);
      bad(4, "unknown GGUF version {} (supported: 2, 3)", version);
    }
    impl_.version = version;
    tensor_count_ = read<uint64_t>("tensor count");
    kv_count_ = read<uint64_t>("metadata count");
    if (kv_count_ > remaining() / kMinKeyValueBytes)
      bad(16, "metadata count {} cannot fit in the {} bytes after the header (each entry takes at least {})",
          kv_count_, remaining(), kMinKeyValueBytes);
    if (tensor_count_ > remaining() / kMinTensorInfoBytes)
      bad(8, "tensor count {} cannot fit in the {} bytes after the header (each tensor info takes at least {})",
          tensor_count_, remaining(), kMinTensorInfoBytes);
  }

  void read_metadata() {
    impl_.metadata.reserve(kv_count_);
    impl_.key_index.reserve(kv_count_);
    for (uint64_t i = 0; i < kv_count_; ++i) {
      where_ = {Where::metadata, i, {}};
      const uint64_t key_at = pos_;
      const std::string_view key = read_string("key");
      where_.name = key;
      if (const auto [it, inserted] = impl_.key_index.emplace(key, impl_.metadata.size()); !inserted)
        bad(key_at, "duplicate metadata key '{}' (entry #{} repeats entry #{})", key, i, it->second);
      const ValueType type = read_value_type("value type");
      if (key == "general.alignment") alignment_at_ = pos_;
      Value value = read_value(type, 0);
      impl_.metadata.push_back(KeyValue{std::string(key), std::move(value)});
    }
  }

  // `depth` counts the arrays around this value (0 for a top-level value).
  Value read_value(ValueType type, int depth) {
    const uint64_t at = pos_;
    switch (type) {
      case ValueType::u8: return Value::make_uint(type, read<uint8_t>("u8 value"));
      case ValueType::i8: return Value::make_int(type, int8_t(read<uint8_t>("i8 value")));
      case ValueType::u16: return Value::make_uint(type, read<uint16_t>("u16 value"));
      case ValueType::i16: return Value::make_int(type, int16_t(read<uint16_t>("i16 value")));
      case ValueType::u32: return Value::make_uint(type, read<uint32_t>("u32 value"));
      case ValueType::i32: return Value::make_int(type, int32_t(read<uint32_t>("i32 value")));
      case ValueType::u64: return Value::make_uint(type, read<uint64_t>("u64 value"));
      case ValueType::i64: return Value::make_int(type, int64_t(read<uint64_t>("i64 value")));
      case ValueType::f32: return Value::make_float(type, std::bit_cast<float>(read<uint32_t>("f32 value")));
      case ValueType::f64: return Value::make_float(type, std::bit_cast<double>(read<uint64_t>("f64 value")));
      case ValueType::boolean: {
        const uint8_t b = read<uint8_t>("bool value");
        if (b > 1) bad(at, "bool value {} is neither 0 nor 1", b);
        return Value::make_bool(b != 0);
      }
      case ValueType::string: return Value::make_string(read_string("string value"));
      case ValueType::array: return read_array(depth + 1);
    }
    bad(at, "unknown value type {}", uint32_t(type));   // unreachable: types are checked when read
  }

  Value read_array(int depth) {
    const uint64_t at = pos_;
    if (depth > kMaxArrayDepth) bad(at, "arrays nested more than {} deep", kMaxArrayDepth);
    Array array;
    array.element_type = read_value_type("array element type");
    const uint64_t length_at = pos_;
    const uint64_t length = read<uint64_t>("array length");
    const uint64_t min_bytes = min_value_bytes(array.element_type);
    if (length > remaining() / min_bytes)
      bad(length_at, "array of {} {} elements cannot fit in the {} bytes left (each takes at least {})", length,
          value_type_name(array.element_type), remaining(), min_bytes);
    array.items.reserve(size_t(length));
    for (uint64_t k = 0; k < length; ++k) array.items.push_back(read_value(array.element_type, depth));
    return Value::make_array(std::move(array));
  }

  void read_alignment() {
    const auto it = impl_.key_index.find("general.alignment");
    if (it == impl_.key_index.end()) return;
    where_ = {Where::metadata, it->second, "general.alignment"};
    const Value& value = impl_.metadata[it->second].value;
    if (!value.is_integer())
      bad(alignment_at_, "general.alignment has type {}, expected u32", value_type_name(value.type()));
    const bool negative = value.type() != ValueType::u64 && value.as_int() < 0;
    const uint64_t alignment = negative ? 0 : value.as_uint();
    if (negative || alignment == 0 || alignment > std::numeric_limits<uint32_t>::max() ||
        !std::has_single_bit(alignment))
      bad(alignment_at_, "general.alignment {} is not a nonzero power of two that fits in u32",
          negative ? value.as_int() : int64_t(alignment));
    impl_.alignment = alignment;
  }

  void read_tensor_infos() {
    if (tensor_count_ > remaining() / kMinTensorInfoBytes)
      bad(pos_, "tensor count {} cannot fit in the {} bytes after the metadata (each tensor info takes at least {})",
          tensor_count_, remaining(), kMinTensorInfoBytes);
    impl_.tensors.reserve(tensor_count_);
    impl_.tensor_index.reserve(tensor_count_);
    offset_at_.reserve(tensor_count_);
    for (uint64_t i = 0; i < tensor_count_; ++i) impl_.tensors.push_back(read_tensor_info(i));
  }

  TensorInfo read_tensor_info(uint64_t index) {
    where_ = {Where::tensor, index, {}};
    const uint64_t name_at = pos_;
    const std::string_view name = read_string("tensor name");
    where_.name = name;
    if (const auto [it, inserted] = impl_.tensor_index.emplace(name, index); !inserted)
      bad(name_at, "duplicate tensor name '{}' (tensor info #{} repeats #{})", name, index, it->second);

    TensorInfo t;
    t.name = std::string(name);
    const uint64_t dims_at = pos_;
    const uint32_t n_dims = read<uint32_t>("dimension count");
    if (n_dims > kMaxDims) bad(dims_at, "{} dimensions, at most {} are allowed", n_dims, kMaxDims);
    t.shape.resize(n_dims);
    int64_t n_elements = 1;
    for (uint32_t j = 0; j < n_dims; ++j) {
      const uint64_t at = pos_;
      const uint64_t dim = read<uint64_t>("dimension");
      if (dim == 0) bad(at, "dimension {} is zero", j);
      if (dim > uint64_t(std::numeric_limits<int64_t>::max())) bad(at, "dimension {} is {}, too large", j, dim);
      t.shape[j] = int64_t(dim);
      if (__builtin_mul_overflow(n_elements, t.shape[j], &n_elements))
        bad(at, "dimensions overflow a 64-bit element count at dimension {} ({})", j, dim);
    }
    t.n_elements = n_elements;

    const uint64_t type_at = pos_;
    const uint32_t type_id = read<uint32_t>("tensor type");
    const std::optional<quant::TypeInfo> info = quant::type_info_from_id(type_id);
    if (!info) bad(type_at, "unknown tensor type id {}", type_id);
    t.type = info->type;
    if (t.cols() % info->block_elems != 0)
      bad(dims_at, "innermost dimension {} is not a multiple of the {} block size {}", t.cols(), info->name,
          info->block_elems);
    if (__builtin_mul_overflow(uint64_t(n_elements) / info->block_elems, uint64_t(info->block_bytes), &t.n_bytes))
      bad(dims_at, "{} elements of {} take more than 2^64 bytes", n_elements, info->name);

    offset_at_.push_back(pos_);
    t.offset = read<uint64_t>("tensor data offset");
    return t;
  }

  void place_tensors() {
    const uint64_t alignment = impl_.alignment;
    // pos_ <= size_ < 2^63 and alignment <= 2^32, so this cannot overflow.
    impl_.data_offset = (pos_ + alignment - 1) / alignment * alignment;
    const uint64_t data_offset = impl_.data_offset;
    for (size_t i = 0; i < impl_.tensors.size(); ++i) {
      TensorInfo& t = impl_.tensors[i];
      where_ = {Where::tensor, i, t.name};
      if (t.offset % alignment != 0)
        bad(offset_at_[i], "data offset {} is not a multiple of the alignment {}", t.offset, alignment);
      if (data_offset > size_ || t.offset > size_ - data_offset || t.n_bytes > size_ - data_offset - t.offset)
        bad(offset_at_[i],
            "data ({} bytes at offset {} of the data section, which starts at byte {}) lies outside the file ({} bytes)",
            t.n_bytes, t.offset, data_offset, size_);
      t.data = data_ + data_offset + t.offset;
    }

    // Overlap: sort by offset and compare neighbours (ends are in bounds, so no overflow).
    std::vector<size_t> order(impl_.tensors.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return impl_.tensors[a].offset < impl_.tensors[b].offset; });
    for (size_t k = 1; k < order.size(); ++k) {
      const TensorInfo& prev = impl_.tensors[order[k - 1]];
      const TensorInfo& cur = impl_.tensors[order[k]];
      if (prev.offset + prev.n_bytes > cur.offset) {
        where_ = {Where::tensor, order[k], cur.name};
        bad(offset_at_[order[k]], "data [{}, {}) overlaps the data of tensor '{}' [{}, {})", cur.offset,
            cur.offset + cur.n_bytes, prev.name, prev.offset, prev.offset + prev.n_bytes);
      }
    }
  }

  File::Impl& impl_;
  const std::byte* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  Where where_;
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;
  uint64_t alignment_at_ = 0;           // byte offset of general.alignment's value
  std::vector<uint64_t> offset_at_;     // byte offset of each tensor's offset field
};

}  // namespace

void parse(File::Impl& impl) { Parser(impl).run(); }

}  // namespace ember::gguf
