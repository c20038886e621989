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

namespace ember::quant::ref {

// ---- plain types: dot with F32 activations, products summed in double ----
void dequantize_f32(const void* src, float* dst, int64_t n);
void quantize_f32(const float* src, void* dst, int64_t n);
float dot_f32(const void* w, const void* x, int64_t n);
void dequantize_f16(const void* src, float* dst, int64_t n);
void quantize_f16(const float* src, void* dst, int64_t n);
float dot_f16(const void* w, const void* x, int64_t n);
void dequantize_bf16(const void* src, float* dst, int64_t n);
void quantize_bf16(const float* src, void* dst, int64_t n);
float dot_bf16(const void* w, const void* x, int64_t n);

// ---- 32-value formats: activations in Q8_0 (symmetric) or Q8_1 (with min) ----
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void quantize_q8_0(const float* src, void* dst, int64_t n);
float dot_q8_0(const void* w, const void* a_q8_0, int64_t n);
void dequantize_q8_1(const void* src, float* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);
void dequantize_q4_0(const void* src, float* dst, int64_t n);
void quantize_q4_0(const float* src, void* dst, int64_t n);
float dot_q4_0(const void* w, const void* a_q8_0, int64_t n);
void dequantize_q4_1(const void* src, float* dst, int64_t n);
void quantize_q4_1(const float* src, void* dst, int64_t n);
float dot_q4_1(const void* w, const void* a_q8_1, int64_t n);
void dequantize_q5_0(const void* src, float* dst, int64_t n);
void quantize_q5_0(const float* src, void* dst, int64_t n);
float dot_q5_0(const void* w, const void* a_q8_0, int64_t n);
void dequantize_q5_1(const void* src, float* dst, int64_t n);
void quantize_q5_1(const float* src, void* dst, int64_t n);
float dot_q5_1(const void* w, const void* a_q8_1, int64_t n);

// ---- 256-value super-block formats: activations in Q8_K ----
void dequantize_q8_k(const void* src, float* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);
void dequantize_q4_k(const void* src, float* dst, int64_t n);
void quantize_q4_k(const float* src, void* dst, int64_t n);
float dot_q4_k(const void* w, const void* a_q8_k, int64_t n);
// dot_q4_k in the order of llama.cpp's batched kernel (quant/lanes.hpp), which it uses for
// the tokens of a batch that fall in whole groups of 4 (WeightKernels::dot_tile_grouped).
float dot_q4_k_grouped(const void* w, const void* a_q8_k, int64_t n);
void dequantize_q5_k(const void* src, float* dst, int64_t n);
void quantize_q5_k(const float* src, void* dst, int64_t n);
float dot_q5_k(const void* w, const void* a_q8_k, int64_t n);
void dequantize_q6_k(const void* src, float* dst, int64_t n);
void quantize_q6_k(const float* src, void* dst, int64_t n);
float dot_q6_k(const void* w, const void* a_q8_k, int64_t n);

// Rounding used by the activation quantizers, shared with the SIMD kernels so that
// both produce identical codes: q = round_half_even(x * (127 / max|x|)) for Q8_0,
// Q8_1 and Q8_K (llama.cpp's x86 arithmetic for Q8_0/Q8_1, ggml's nearest_int for Q8_K).

}  // namespace ember::quant::ref
