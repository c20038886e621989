// libFuzzer target: parse arbitrary bytes as GGUF and touch everything parsed.
//
// Any ember::Error is an accepted outcome; a crash, a sanitizer report, another
// exception type, a hang or runaway memory is a bug. Reading every string byte
// and the first and last byte of every tensor makes ASan check that the views the
// parser hands out really lie inside the image.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ember/error.hpp"
#include "gguf/gguf.hpp"

namespace {

volatile uint64_t g_sink = 0;   // keeps the reads from being optimised away

uint64_t touch(const ember::gguf::Value& value) {
  using ember::gguf::ValueType;
  uint64_t acc = uint64_t(value.type());
  switch (value.type()) {
    case ValueType::string:
      for (char c : value.as_string()) acc += uint8_t(c);
      break;
    case ValueType::array: {
      const ember::gguf::Array& array = value.as_array();
      acc += array.items.size();
      for (const ember::gguf::Value& item : array.items) {
        if (item.type() != array.element_type) __builtin_trap();   // the parser promised one type
        acc += touch(item);
      }
      break;
    }
    case ValueType::boolean: acc += value.as_bool(); break;
    case ValueType::f32:
    case ValueType::f64: acc += uint64_t(value.as_float() != 0.0); break;
    default:
      acc += uint64_t(value.as_float() > 0);   // every integer type converts
      try {
        acc += value.as_uint();
      } catch (const ember::Error&) {   // negative signed values
        acc += uint64_t(value.as_int());
      }
  }
  return acc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::byte> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = std::byte(data[i]);
  try {
    const ember::gguf::File file = ember::gguf::File::from_bytes(std::move(bytes), "fuzz.gguf");
    uint64_t acc = file.version() + file.alignment() + file.data_offset();
    for (const ember::gguf::KeyValue& kv : file.metadata()) {
      if (file.find(kv.key) != &kv.value) __builtin_trap();   // lookup agrees with the list
      acc += touch(kv.value);
    }
    for (const ember::gguf::TensorInfo& t : file.tensors()) {
      if (&file.tensor(t.name) != &t) __builtin_trap();
      if (t.n_bytes == 0 || t.offset % file.alignment() != 0) __builtin_trap();
      acc += std::to_integer<uint8_t>(t.data[0]) + std::to_integer<uint8_t>(t.data[t.n_bytes - 1]);
      acc += uint64_t(t.rows() * t.cols()) + uint64_t(t.n_elements);
    }
    g_sink = g_sink + acc;
  } catch (const ember::Error&) {
  }
  return 0;
}
