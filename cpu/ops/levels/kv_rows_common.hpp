// Pieces of the quantized KV-cache row kernels (kv_rows.cpp of each level) that are the
// same at every level: the INT4 rotation, which is lib/quant's reference function, and
// the table of one format from a level's templates. Internal linkage: compiled with
// several levels' flags.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/fp16.hpp"
#include "cpu/kernels/op_kernels.hpp"
#include "quant/kv_formats.hpp"

namespace ember::cpu {
namespace {

inline float load_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

inline void rotate_none(float*, int64_t) {}
template <int G>
void rotate_q4(float* v, int64_t n) {
  quant::kv::rotate_groups(v, n, G);
}
template <int G>
void unrotate_q4(float* v, int64_t n) {
  quant::kv::unrotate_groups(v, n, G);
}
// decode() of INT4: the stored values, then the reference inverse rotation.
template <void (*Stored)(const void*, float*, int), int G>
void decode_q4_rotated(const void* row, float* out, int n) {
  Stored(row, out, n);
  quant::kv::unrotate_groups(out, n, G);
}

// INT4 with outliers: each block is the outliers (kv_formats.hpp) followed by an INT4
// block, decoded by the level's INT4 kernel; the outliers are added, rotated, by the
// reference function, so the stored values are bit for bit the reference ones.
constexpr int kQ4oHead = 3 * quant::kv::kOutliers;
template <void (*Stored)(const void*, float*, int), int G>
void decode_q4o(const void* row, float* out, int n) {
  const auto* b = static_cast<const uint8_t*>(row);
  for (int g = 0; g < n / G; ++g, b += quant::kv::q4o_block_bytes(G), out += G) {
    Stored(b + kQ4oHead, out, G);
    quant::kv::add_q4o_outliers(b, out, G);
  }
}
template <void (*Stored)(const void*, float*, int), int G>
void decode_q4o_rotated(const void* row, float* out, int n) {
  decode_q4o<Stored, G>(row, out, n);
  quant::kv::unrotate_groups(out, n, G);
}
// dot and axpy of INT4 with outliers: decode a group, then the level's f32 kernels.
template <void (*Stored)(const void*, float*, int), float (*Dot)(const float*, const float*, int), int G>
float dot_q4o(const float* q, const void* row, int n) {
  const auto* b = static_cast<const uint8_t*>(row);
  alignas(64) float y[G];
  float total = 0.0f;
  for (int g = 0; g < n / G; ++g, b += quant::kv::q4o_block_bytes(G), q += G) {
    decode_q4o<Stored, G>(b, y, G);
    total += Dot(q, y, G);
  }
  return total;
}
template <void (*Stored)(const void*, float*, int), void (*Axpy)(float*, float, const float*, int), int G>
void axpy_q4o(float* acc, float w, const void* row, int n) {
  const auto* b = static_cast<const uint8_t*>(row);
  alignas(64) float y[G];
  for (int g = 0; g < n / G; ++g, b += quant::kv::q4o_block_bytes(G), acc += G) {
    decode_q4o<Stored, G>(b, y, G);
    Axpy(acc, w, y, G);
  }
}

// The tables of the six formats from a level's kernels: K::dot_q8<G>, axpy_q8<G>,
// decode_q8<G>, dot_q4<G>, axpy_q4<G>, decode_q4<G> (stored values), dot_f32, axpy_f32.
template <class K>
struct KvRowTables {
  template <int G>
  static constexpr KvRowKernels q8 = {K::template dot_q8<G>, K::template axpy_q8<G>, K::template decode_q8<G>,
                                      K::template decode_q8<G>, rotate_none, rotate_none, K::dot_f32, K::axpy_f32};
  template <int G>
  static constexpr KvRowKernels q4 = {K::template dot_q4<G>,    K::template axpy_q4<G>,
                                      K::template decode_q4<G>, decode_q4_rotated<K::template decode_q4<G>, G>,
                                      rotate_q4<G>,             unrotate_q4<G>,
                                      K::dot_f32,               K::axpy_f32};
  template <int G>
  static constexpr KvRowKernels q4o = {dot_q4o<K::template decode_q4<G>, K::dot_f32, G>,
                                       axpy_q4o<K::template decode_q4<G>, K::axpy_f32, G>,
                                       decode_q4o<K::template decode_q4<G>, G>,
                                       decode_q4o_rotated<K::template decode_q4<G>, G>,
                                       rotate_q4<G>,
                                       unrotate_q4<G>,
                                       K::dot_f32,
                                       K::axpy_f32};

  static const KvRowKernels* of(quant::DType type) {
    switch (type) {
      case quant::DType::kv_q8_g32: return &q8<32>;
      case quant::DType::kv_q8_g64: return &q8<64>;
      case quant::DType::kv_q4_g32: return &q4<32>;
      case quant::DType::kv_q4_g64: return &q4<64>;
      case quant::DType::kv_q4o_g32: return &q4o<32>;
      case quant::DType::kv_q4o_g64: return &q4o<64>;
      default: return nullptr;
    }
  }
};

}  // namespace
}  // namespace ember::cpu
