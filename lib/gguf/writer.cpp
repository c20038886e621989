// gguf::Writer: lays out a GGUF v3 image the reader accepts.
//
// Layout written: header, metadata in insertion order, tensor infos in insertion
// order, zero padding to the alignment, then each tensor's data at the next
// multiple of the alignment (offsets relative to the data section). Nothing is
// written after the last tensor, so every strict prefix of a file with tensors is
// invalid (the tests rely on that).
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <unordered_set>

#include "common/fail.hpp"
#include "gguf/byte_order.hpp"
#include "gguf/gguf.hpp"

namespace ember::gguf {
namespace {

constexpr uint64_t kDefaultAlignment = 32;

class ByteSink {
 public:
  template <typename T>
  void put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    detail::store_le<T>(out_.data() + at, v);
  }
  void put_bytes(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    put_bytes(s.data(), s.size());
  }
  void pad_to(uint64_t alignment, uint64_t base = 0) {
    const uint64_t rel = out_.size() - base;
    out_.resize(size_t(base + (rel + alignment - 1) / alignment * alignment), std::byte{0});
  }
  size_t size() const { return out_.size(); }
  void reserve(size_t n) { out_.reserve(n); }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

// `where` names the key and the position inside nested arrays, for messages.
void put_value(ByteSink& out, const Value& v, const std::string& where) {
  switch (v.type()) {
    case ValueType::u8: case ValueType::i8: out.put<uint8_t>(uint8_t(v.as_int())); return;
    case ValueType::u16: case ValueType::i16: out.put<uint16_t>(uint16_t(v.as_int())); return;
    case ValueType::u32: case ValueType::i32: out.put<uint32_t>(uint32_t(v.as_int())); return;
    case ValueType::u64: out.put<uint64_t>(v.as_uint()); return;
    case ValueType::i64: out.put<uint64_t>(uint64_t(v.as_int())); return;
    case ValueType::f32: out.put<uint32_t>(std::bit_cast<uint32_t>(float(v.as_float()))); return;
    case ValueType::f64: out.put<uint64_t>(std::bit_cast<uint64_t>(v.as_float())); return;
    case ValueType::boolean: out.put<uint8_t>(v.as_bool() ? 1 : 0); return;
    case ValueType::string: out.put_string(v.as_string()); return;
    case ValueType::array: {
      const Array& array = v.as_array();
      out.put<uint32_t>(uint32_t(array.element_type));
      out.put<uint64_t>(array.items.size());
      for (size_t i = 0; i < array.items.size(); ++i) {
        const Value& item = array.items[i];
        require(item.type() == array.element_type, "gguf::Writer: {}[{}] has type {} in an array of {}", where, i,
                value_type_name(item.type()), value_type_name(array.element_type));
        if (item.is_array())
          put_value(out, item, fmt::format("{}[{}]", where, i));
        else
          put_value(out, item, where);
      }
      return;
    }
  }
  require(false, "gguf::Writer: '{}' has an unknown value type {}", where, uint32_t(v.type()));
}

}  // namespace

struct Writer::Impl {
  struct Tensor {
    std::string name;
    quant::DType type;
    std::vector<int64_t> shape;
    uint64_t n_bytes = 0;
    std::vector<std::byte> data;   // empty when `fill` makes the bytes at write time
    Writer::Fill fill;
  };

  uint64_t alignment = kDefaultAlignment;
  std::vector<KeyValue> metadata;
  std::deque<std::string> owned_strings;   // storage for add_string*, stable addresses
  std::vector<Tensor> tensors;
  std::unordered_set<std::string> keys;
  std::unordered_set<std::string> tensor_names;

  std::string_view own(std::string s) { return owned_strings.emplace_back(std::move(s)); }
};

Writer::Writer(uint64_t alignment) : impl_(std::make_shared<Impl>()) {
  require(alignment != 0 && alignment <= std::numeric_limits<uint32_t>::max() && std::has_single_bit(alignment),
          "gguf::Writer: alignment {} is not a nonzero power of two that fits in u32", alignment);
  impl_->alignment = alignment;
  if (alignment != kDefaultAlignment) add_uint32("general.alignment", uint32_t(alignment));
}

void Writer::add(std::string key, Value value) {
  require(!impl_->keys.contains(key), "gguf::Writer: duplicate metadata key '{}'", key);
  impl_->keys.insert(key);
  impl_->metadata.push_back(KeyValue{std::move(key), std::move(value)});
}

void Writer::add_uint32(std::string key, uint32_t v) { add(std::move(key), Value::make_uint(ValueType::u32, v)); }
void Writer::add_float32(std::string key, float v) { add(std::move(key), Value::make_float(ValueType::f32, v)); }
void Writer::add_bool(std::string key, bool v) { add(std::move(key), Value::make_bool(v)); }

void Writer::add_string(std::string key, std::string v) {
  add(std::move(key), Value::make_string(impl_->own(std::move(v))));
}

void Writer::add_string_array(std::string key, const std::vector<std::string>& v) {
  Array array{ValueType::string, {}};
  array.items.reserve(v.size());
  for (const std::string& s : v) array.items.push_back(Value::make_string(impl_->own(s)));
  add(std::move(key), Value::make_array(std::move(array)));
}

void Writer::add_float32_array(std::string key, const std::vector<float>& v) {
  Array array{ValueType::f32, {}};
  array.items.reserve(v.size());
  for (float x : v) array.items.push_back(Value::make_float(ValueType::f32, x));
  add(std::move(key), Value::make_array(std::move(array)));
}

void Writer::add_int32_array(std::string key, const std::vector<int32_t>& v) {
  Array array{ValueType::i32, {}};
  array.items.reserve(v.size());
  for (int32_t x : v) array.items.push_back(Value::make_int(ValueType::i32, x));
  add(std::move(key), Value::make_array(std::move(array)));
}

namespace {

// Checks a tensor's name, shape and type; returns its byte size.
uint64_t checked_tensor_bytes(const std::unordered_set<std::string>& names, const std::string& name, quant::DType type,
                              const std::vector<int64_t>& shape) {
  require(!names.contains(name), "gguf::Writer: duplicate tensor '{}'", name);
  require(shape.size() <= 4, "gguf::Writer: tensor '{}' has {} dimensions, at most 4 are allowed", name, shape.size());
  const quant::TypeInfo& info = quant::type_info(type);
  int64_t n_elements = 1;
  for (size_t j = 0; j < shape.size(); ++j) {
    require(shape[j] > 0, "gguf::Writer: tensor '{}' dimension {} is {}, must be positive", name, j, shape[j]);
    require(!__builtin_mul_overflow(n_elements, shape[j], &n_elements),
            "gguf::Writer: tensor '{}' has too many elements", name);
  }
  const int64_t cols = shape.empty() ? 1 : shape[0];
  require(cols % info.block_elems == 0, "gguf::Writer: tensor '{}' innermost dimension {} is not a multiple of the {} block size {}",
          name, cols, info.name, info.block_elems);
  uint64_t n_bytes = 0;
  require(!__builtin_mul_overflow(uint64_t(n_elements) / info.block_elems, uint64_t(info.block_bytes), &n_bytes),
          "gguf::Writer: tensor '{}' is too large", name);
  return n_bytes;
}

}  // namespace

void Writer::add_tensor(std::string name, quant::DType type, std::vector<int64_t> shape,
                        std::span<const std::byte> data) {
  const uint64_t n_bytes = checked_tensor_bytes(impl_->tensor_names, name, type, shape);
  require(data.size() == n_bytes, "gguf::Writer: tensor '{}' needs {} bytes of {} data, got {}", name, n_bytes,
          quant::type_info(type).name, data.size());
  impl_->tensor_names.insert(name);
  impl_->tensors.push_back(Impl::Tensor{std::move(name), type, std::move(shape), n_bytes,
                                        std::vector<std::byte>(data.begin(), data.end()), {}});
}

void Writer::add_deferred_tensor(std::string name, quant::DType type, std::vector<int64_t> shape, Fill fill) {
  const uint64_t n_bytes = checked_tensor_bytes(impl_->tensor_names, name, type, shape);
  require(bool(fill), "gguf::Writer: tensor '{}' has no fill function", name);
  impl_->tensor_names.insert(name);
  impl_->tensors.push_back(Impl::Tensor{std::move(name), type, std::move(shape), n_bytes, {}, std::move(fill)});
}

namespace {

// Header, metadata, tensor infos and the padding up to the data section of `impl`;
// `data_bytes` receives the size of the data section (each tensor at its aligned offset).
template <typename Impl>
ByteSink layout_head(const Impl& impl, uint64_t& data_bytes) {
  const uint64_t alignment = impl.alignment;
  ByteSink out;
  out.put_bytes("GGUF", 4);
  out.put<uint32_t>(3);
  out.put<uint64_t>(impl.tensors.size());
  out.put<uint64_t>(impl.metadata.size());
  for (const KeyValue& kv : impl.metadata) {
    out.put_string(kv.key);
    out.put<uint32_t>(uint32_t(kv.value.type()));
    put_value(out, kv.value, kv.key);
  }
  uint64_t offset = 0;   // next tensor's offset in the data section
  for (const auto& t : impl.tensors) {
    offset = (offset + alignment - 1) / alignment * alignment;
    out.put_string(t.name);
    out.put<uint32_t>(uint32_t(t.shape.size()));
    for (int64_t d : t.shape) out.put<uint64_t>(uint64_t(d));
    out.put<uint32_t>(uint32_t(t.type));
    out.put<uint64_t>(offset);
    offset += t.n_bytes;
  }
  if (!impl.tensors.empty()) out.pad_to(alignment);
  data_bytes = offset;
  return out;
}

}  // namespace

std::vector<std::byte> Writer::to_bytes() const {
  uint64_t data_bytes = 0;
  ByteSink out = layout_head(*impl_, data_bytes);
  if (impl_->tensors.empty()) return out.take();
  const uint64_t data_start = out.size();
  out.reserve(size_t(data_start + data_bytes));
  for (const Impl::Tensor& t : impl_->tensors) {
    out.pad_to(impl_->alignment, data_start);
    if (t.fill) {
      std::vector<std::byte> bytes(size_t(t.n_bytes));
      t.fill(bytes);
      out.put_bytes(bytes.data(), bytes.size());
    } else {
      out.put_bytes(t.data.data(), t.data.size());
    }
  }
  return out.take();
}

// Streams the same bytes as to_bytes() without building the image in memory.
void Writer::write(const std::filesystem::path& path) const {
  uint64_t data_bytes = 0;
  const std::vector<std::byte> head = layout_head(*impl_, data_bytes).take();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) fail(ErrorCode::io, "cannot create '{}': {}", path.string(), std::strerror(errno));
  struct Closer {   // closes the file when a fill function throws
    std::FILE*& f;
    ~Closer() {
      if (f) std::fclose(f);
    }
  } closer{f};
  bool ok = head.empty() || std::fwrite(head.data(), 1, head.size(), f) == head.size();
  const std::byte zeros[256] = {};
  uint64_t at = 0;   // position in the data section
  for (size_t i = 0; ok && i < impl_->tensors.size(); ++i) {
    const Impl::Tensor& t = impl_->tensors[i];
    const uint64_t start = (at + impl_->alignment - 1) / impl_->alignment * impl_->alignment;
    for (uint64_t pad = start - at; ok && pad > 0;) {
      const size_t n = size_t(std::min<uint64_t>(pad, sizeof zeros));
      ok = std::fwrite(zeros, 1, n, f) == n;
      pad -= n;
    }
    if (ok && t.fill) {
      std::vector<std::byte> bytes(size_t(t.n_bytes));
      t.fill(bytes);
      ok = bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    } else {
      ok = ok && (t.data.empty() || std::fwrite(t.data.data(), 1, t.data.size(), f) == t.data.size());
    }
    at = start + t.n_bytes;
  }
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  f = nullptr;
  if (!ok || !closed) fail(ErrorCode::io, "cannot write '{}': {}", path.string(), std::strerror(!ok ? write_errno : errno));
}

}  // namespace ember::gguf
