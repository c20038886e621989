// Helpers for the GGUF tests: a small valid file, byte patching, error checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "common/catch.hpp"
#include "ember/error.hpp"
#include "gguf/gguf.hpp"

namespace ember::test {

using Bytes = std::vector<std::byte>;

inline Bytes pattern_bytes(size_t n, uint32_t seed) {
  Bytes out(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : out) {
    x = x * 1664525u + 1013904223u;
    b = std::byte(x >> 24);
  }
  return out;
}

// A small valid file: five metadata entries and two tensors (F32 [4, 2] and
// Q8_0 [32, 2]). The names are unique byte strings so tests can find and patch
// their fields. The long first value leaves enough bytes that cuts after it pass
// the count checks and reach the field being cut.
inline Bytes small_file() {
  gguf::Writer w;
  w.add_string("general.description", std::string(120, 'd'));
  w.add_string("general.architecture", "llama");
  w.add_uint32("llama.block_count", 2);
  w.add_string_array("tokenizer.ggml.tokens", {"<s>", "hello", "world"});
  w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.add_tensor("alpha.weight", quant::DType::f32, {4, 2}, pattern_bytes(32, 1));
  w.add_tensor("beta.weight", quant::DType::q8_0, {32, 2}, pattern_bytes(68, 2));
  return w.to_bytes();
}

// Byte offset of the first occurrence of `needle`; fails the test when absent.
inline size_t find_bytes(const Bytes& bytes, std::string_view needle) {
  const auto* begin = reinterpret_cast<const char*>(bytes.data());
  const std::string_view hay(begin, bytes.size());
  const size_t at = hay.find(needle);
  INFO("looking for '" << needle << "'");
  REQUIRE(at != std::string_view::npos);
  return at;
}

// Offset just after a key or tensor name string: the value-type field of a
// metadata entry, or the n_dims field of a tensor info.
inline size_t after(const Bytes& bytes, std::string_view name) { return find_bytes(bytes, name) + name.size(); }

inline void put_u32(Bytes& bytes, size_t at, uint32_t v) {
  REQUIRE(at + 4 <= bytes.size());
  for (int i = 0; i < 4; ++i) bytes[at + i] = std::byte(uint8_t(v >> (8 * i)));
}
inline void put_u64(Bytes& bytes, size_t at, uint64_t v) {
  REQUIRE(at + 8 <= bytes.size());
  for (int i = 0; i < 8; ++i) bytes[at + i] = std::byte(uint8_t(v >> (8 * i)));
}
inline uint64_t get_u64(const Bytes& bytes, size_t at) {
  REQUIRE(at + 8 <= bytes.size());
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(std::to_integer<uint8_t>(bytes[at + i])) << (8 * i);
  return v;
}

inline Bytes prefix(const Bytes& bytes, size_t n) { return Bytes(bytes.begin(), bytes.begin() + ptrdiff_t(n)); }

// Requires `fn` to throw ember::Error with `code` and a message containing every needle.
inline void require_error(const std::function<void()>& fn, ErrorCode code,
                          std::initializer_list<std::string_view> needles) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string message = e.what();
    INFO("message: " << message);
    CHECK(std::string(to_string(e.code())) == to_string(code));
    for (std::string_view needle : needles) {
      INFO("expected substring: " << needle);
      CHECK(message.find(needle) != std::string::npos);
    }
    return;
  }
  FAIL("no ember::Error was thrown");
}

inline void require_malformed(const Bytes& bytes, std::initializer_list<std::string_view> needles) {
  require_error([&] { gguf::File::from_bytes(bytes, "corrupt.gguf"); }, ErrorCode::malformed_file, needles);
}

}  // namespace ember::test
