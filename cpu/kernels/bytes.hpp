// Unaligned little-endian reads of the scalar fields of GGUF blocks (scales, bit
// masks), shared by the kernel levels. Internal linkage: see cpu/kernels/tile.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ember::cpu {
namespace {

inline uint16_t load_u16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t load_u32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline float load_f32(const std::byte* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace
}  // namespace ember::cpu
