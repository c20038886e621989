// Decoding helpers shared by the AVX2 level's quantized KV-cache kernels (kv_rows.cpp)
// and its fused decode-attention kernels (attention_decode.cpp). Internal linkage;
// included only by files compiled with the AVX2 level's flags.
#pragma once

#include <cstdint>
#include <cstring>

#include "cpu/kernels/x86_intrinsics.hpp"

namespace ember::cpu::avx2 {
namespace {

// The F16 value stored at p (unaligned), widened by F16C.
inline float half_f16c(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
// 8 int8 codes at `c` as floats.
inline __m256 i8x8(const uint8_t* c) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c))));
}

}  // namespace
}  // namespace ember::cpu::avx2
