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

// The tables of the four formats from a level's kernels: K::dot_q8<G>, axpy_q8<G>,
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

  static const KvRowKernels* of(quant::DType type) {
    switch (type) {
      case quant::DType::kv_q8_g32: return &q8<32>;
      case quant::DType::kv_q8_g64: return &q8<64>;
      case quant::DType::kv_q4_g32: return &q4<32>;
      case quant::DType::kv_q4_g64: return &q4<64>;
      default: return nullptr;
    }
  }
};

}  // namespace
}  // namespace ember::cpu
