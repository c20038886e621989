// Per-format reference functions behind quant.hpp, one source file per format
// (f32.cpp ... q6_k.cpp). quant.cpp dispatches on DType; the scalar CPU kernels
// and the tests may call these directly.
//
// Dot products: every block contributes one float term computed exactly as
// written in its file (integer sum of code products, then the float scale
// arithmetic); terms are accumulated in double and the sum rounded to float.
// Fast kernels may sum the same terms in any order (in float).
#pragma once

#include <cstdint>

#include "quant/weight_types.hpp"

namespace ember::quant::ref {

// ---- every weight type of the registry (quant/weight_types.hpp), in <id>.cpp ----
// dot_<id>: one weight row with one activation row in the type's activation type
// (F32 for the plain types, whose products are summed in double).
#define EMBER_REF_DECLARE(id, ...)                                \
  void dequantize_##id(const void* src, float* dst, int64_t n); \
  void quantize_##id(const float* src, void* dst, int64_t n);   \
  float dot_##id(const void* w, const void* a, int64_t n);
EMBER_WEIGHT_TYPES(EMBER_REF_DECLARE)
#undef EMBER_REF_DECLARE

// ---- activation-only formats: Q8_1 (32 values, symmetric, with the fp16 sum), Q8_K, Q8_T ----
void dequantize_q8_1(const void* src, float* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);
void dequantize_q8_k(const void* src, float* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);
// Q8_T: Q8_0's layout with one scale per call (per token), Q8_W's activations (q8_w.cpp).
void dequantize_q8_t(const void* src, float* dst, int64_t n);
void quantize_q8_t(const float* src, void* dst, int64_t n);
// Q8_TR: Q8_T of the values rotated per group of kQ8WRGroup, Q8_WR's activations (q8_wr.cpp).
inline constexpr int kQ8WRGroup = 64;
void dequantize_q8_tr(const void* src, float* dst, int64_t n);
void quantize_q8_tr(const float* src, void* dst, int64_t n);

// dot_q4_k in the order of llama.cpp's batched kernel (quant/lanes.hpp), which it uses for
// the tokens of a batch that fall in whole groups of 4 (WeightKernels::dot_tile_grouped).
float dot_q4_k_grouped(const void* w, const void* a_q8_k, int64_t n);

// Rounding used by the activation quantizers, shared with the SIMD kernels so that
// both produce identical codes: q = round_half_even(x * (127 / max|x|)) for Q8_0,
// Q8_1 and Q8_K (llama.cpp's x86 arithmetic for Q8_0/Q8_1, ggml's nearest_int for Q8_K).

}  // namespace ember::quant::ref
