// CPU kernels for the weight formats, one table per instruction-set level.
//
// The scalar level is lib/quant's reference arithmetic; AVX2 and AVX-512 levels
// are compiled with their own flags (cpu/CMakeLists.txt) and only called after
// the CPU reports the features. Every level computes what lib/quant specifies
// and is tested against it (tests/quant).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "quant/dtype.hpp"

namespace ember::cpu {

enum class Isa { scalar, avx2, avx512 };
std::string_view isa_name(Isa isa);

// Levels this CPU can run, from scalar to the best.
std::span<const Isa> available_isas();
// The best available level, or the one forced by EMBER_CPU_ISA=scalar|avx2|avx512 (if available).
Isa best_isa();

// Kernels for one weight type at one level.
struct WeightKernels {
  quant::DType weight_type;
  quant::DType activation_type;   // quant::activation_type(weight_type)
  // Converts `n` f32 activations to activation_type (n: multiple of the block size).
  void (*quantize_activations)(const float* x, void* dst, int64_t n);
  // Dot product of a weight row with a converted activation row, as quant::dot_row.
  float (*dot)(const void* weights, const void* activations, int64_t n);
  // out[j * out_stride + i] = dot(weights row i, activation row j) for i < n_w, j < n_x:
  // a small tile that reuses loaded activations across weight rows.
  void (*dot_tile)(const void* weights, size_t weight_row_bytes, int n_w, const void* activations,
                   size_t activation_row_bytes, int n_x, float* out, size_t out_stride, int64_t n);
  // Dequantizes `n` values (embedding lookups).
  void (*dequantize)(const void* src, float* dst, int64_t n);
};

// Kernels of `weight_type` at level `isa`; throws unsupported for types without kernels.
const WeightKernels& weight_kernels(Isa isa, quant::DType weight_type);

}  // namespace ember::cpu
