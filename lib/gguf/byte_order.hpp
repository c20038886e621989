// Little-endian loads and stores for the GGUF reader and writer (internal).
//
// GGUF integers and floats are little-endian. These helpers assemble values byte
// by byte, so they are correct on any host and compile to single moves on
// little-endian ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace ember::gguf::detail {

template <typename T>
T load_le(const std::byte* p) {
  static_assert(std::is_unsigned_v<T>);
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= T(std::to_integer<uint8_t>(p[i])) << (8 * i);
  return v;
}

template <typename T>
void store_le(std::byte* p, T v) {
  static_assert(std::is_unsigned_v<T>);
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = std::byte(uint8_t(v >> (8 * i)));
}

// Bytes a metadata value of each scalar type occupies; 0 for string and array.
inline uint64_t scalar_size(uint32_t type) {
  constexpr uint8_t kSizes[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return type < 13 ? kSizes[type] : 0;
}

}  // namespace ember::gguf::detail
