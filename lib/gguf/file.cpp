// gguf::File: construction and the read-only accessors over a parsed file.
#include "common/fail.hpp"
#include "gguf/file_impl.hpp"

namespace ember::gguf {

int64_t TensorInfo::rows() const {
  int64_t rows = 1;
  for (size_t i = 1; i < shape.size(); ++i) rows *= shape[i];   // cannot overflow: validated on load
  return rows;
}

File::File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

File File::open(const std::filesystem::path& path) {
  auto impl = std::make_unique<Impl>();
  impl->name = path.string();
  impl->mapping = MappedFile(path);
  impl->bytes = impl->mapping.bytes();
  parse(*impl);
  return File(std::move(impl));
}

File File::from_bytes(std::vector<std::byte> bytes, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->name = std::move(name);
  impl->owned = std::move(bytes);
  impl->bytes = impl->owned;
  parse(*impl);
  return File(std::move(impl));
}

File File::from_view(std::span<const std::byte> bytes, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->name = std::move(name);
  impl->bytes = bytes;
  parse(*impl);
  return File(std::move(impl));
}

const std::string& File::name() const { return impl_->name; }
uint32_t File::version() const { return impl_->version; }
uint64_t File::alignment() const { return impl_->alignment; }
uint64_t File::data_offset() const { return impl_->data_offset; }
uint64_t File::file_size() const { return impl_->bytes.size(); }
std::span<const std::byte> File::bytes() const { return impl_->bytes; }

std::span<const KeyValue> File::metadata() const { return impl_->metadata; }

const Value* File::find(std::string_view key) const {
  const auto it = impl_->key_index.find(key);
  return it == impl_->key_index.end() ? nullptr : &impl_->metadata[it->second].value;
}

const Value& File::get(std::string_view key) const {
  if (const Value* v = find(key)) return *v;
  fail(ErrorCode::malformed_file, "{}: missing required metadata key '{}'", impl_->name, key);
}

uint64_t File::get_uint(std::string_view key) const { return get(key).as_uint(key); }

uint64_t File::get_uint_or(std::string_view key, uint64_t fallback) const {
  const Value* v = find(key);
  return v ? v->as_uint(key) : fallback;
}

int64_t File::get_int(std::string_view key) const { return get(key).as_int(key); }

int64_t File::get_int_or(std::string_view key, int64_t fallback) const {
  const Value* v = find(key);
  return v ? v->as_int(key) : fallback;
}

double File::get_float(std::string_view key) const { return get(key).as_float(key); }

double File::get_float_or(std::string_view key, double fallback) const {
  const Value* v = find(key);
  return v ? v->as_float(key) : fallback;
}

bool File::get_bool_or(std::string_view key, bool fallback) const {
  const Value* v = find(key);
  return v ? v->as_bool(key) : fallback;
}

std::string_view File::get_string(std::string_view key) const { return get(key).as_string(key); }

std::optional<std::string_view> File::find_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return v->as_string(key);
}

const Array& File::get_array(std::string_view key) const { return get(key).as_array(key); }

std::span<const TensorInfo> File::tensors() const { return impl_->tensors; }

const TensorInfo* File::find_tensor(std::string_view name) const {
  const auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
  if (const TensorInfo* t = find_tensor(name)) return *t;
  fail(ErrorCode::malformed_file, "{}: missing tensor '{}'", impl_->name, name);
}

}  // namespace ember::gguf
