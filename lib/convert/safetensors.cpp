// .safetensors reader (safetensors.hpp).
#include "convert/safetensors.hpp"

#include <cstring>
#include <limits>

#include "common/fail.hpp"
#include "common/json.hpp"

namespace ember::convert {

namespace {

StDType parse_dtype(const std::string& s) {
  if (s == "F64") return StDType::f64;
  if (s == "F32") return StDType::f32;
  if (s == "F16") return StDType::f16;
  if (s == "BF16") return StDType::bf16;
  if (s == "I64") return StDType::i64;
  if (s == "I32") return StDType::i32;
  if (s == "I16") return StDType::i16;
  if (s == "I8") return StDType::i8;
  if (s == "U8") return StDType::u8;
  if (s == "BOOL") return StDType::boolean;
  return StDType::other;
}

}  // namespace

size_t st_dtype_size(StDType t) {
  switch (t) {
    case StDType::f64: case StDType::i64: return 8;
    case StDType::f32: case StDType::i32: return 4;
    case StDType::f16: case StDType::bf16: case StDType::i16: return 2;
    case StDType::i8: case StDType::u8: case StDType::boolean: return 1;
    case StDType::other: return 0;
  }
  return 0;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path), map_(path) { parse(map_.bytes()); }

SafetensorsFile::SafetensorsFile(std::span<const std::byte> bytes, std::string name) : path_(std::move(name)) {
  parse(bytes);
}

void SafetensorsFile::parse(std::span<const std::byte> bytes) {
  const std::string& path = path_;
  const uint64_t size = bytes.size();
  if (size < 8) fail(ErrorCode::malformed_file, "'{}': {} bytes, too short for a safetensors header", path, size);
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | uint64_t(std::to_integer<uint8_t>(bytes[size_t(i)]));
  if (header > size - 8)
    fail(ErrorCode::malformed_file, "'{}': header of {} bytes runs past the end of the file ({} bytes)", path, header,
         size);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, size_t(header));
  const json::Value root = json::parse(text, path + " (safetensors header)");
  const json::Object& members = root.as_object(path + ": safetensors header");
  const std::byte* data = bytes.data() + 8 + header;
  const uint64_t data_size = size - 8 - header;
  for (const auto& [name, info] : members) {
    if (name == "__metadata__") continue;
    const std::string what = fmt::format("'{}': tensor '{}'", path, name);
    const json::Value* dtype = info.find("dtype");
    const json::Value* shape = info.find("shape");
    const json::Value* offsets = info.find("data_offsets");
    if (!dtype || !shape || !offsets) fail(ErrorCode::malformed_file, "{}: needs dtype, shape and data_offsets", what);
    StTensor t;
    t.name = name;
    t.dtype_name = dtype->as_string(what + " dtype");
    t.dtype = parse_dtype(t.dtype_name);
    for (const json::Value& d : shape->as_array(what + " shape")) {
      const int64_t n = d.as_int(what + " shape");
      if (n < 0 || (n > 0 && t.n_elements > std::numeric_limits<int64_t>::max() / n))
        fail(ErrorCode::malformed_file, "{}: bad shape", what);
      t.shape.push_back(n);
      t.n_elements *= n;
    }
    const json::Array& off = offsets->as_array(what + " data_offsets");
    if (off.size() != 2) fail(ErrorCode::malformed_file, "{}: data_offsets needs two numbers", what);
    const int64_t begin = off[0].as_int(what + " data_offsets"), end = off[1].as_int(what + " data_offsets");
    if (begin < 0 || end < begin || uint64_t(end) > data_size)
      fail(ErrorCode::malformed_file, "{}: data_offsets [{}, {}) outside the {} data bytes", what, begin, end, data_size);
    t.n_bytes = uint64_t(end - begin);
    const size_t elem = st_dtype_size(t.dtype);
    if (elem != 0 && (t.n_bytes % elem != 0 || t.n_bytes / elem != uint64_t(t.n_elements)))
      fail(ErrorCode::malformed_file, "{}: {} bytes for {} elements of {}", what, t.n_bytes, t.n_elements, t.dtype_name);
    t.data = data + begin;
    tensors_.push_back(std::move(t));
  }
}

}  // namespace ember::convert
