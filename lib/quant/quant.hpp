// Scalar reference arithmetic of every weight format: the specification that each
// fast kernel (cpu/, cuda/) is tested against.
//
// Layouts follow ggml's block definitions (ggml/src/ggml-common.h) and its
// reference dequantizers (gguf-py/gguf/quants.py). Matrix-vector products follow
// the same scheme as llama.cpp: the activation row is first converted to the
// weight's companion "activation type" (Q8_0, Q8_1 or Q8_K for the quantized
// formats), then an integer dot product per block is scaled by both block scales.
// Float formats (F32, F16, BF16) use F32 activations directly.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/dtype.hpp"

namespace ember::quant {

// Dequantizes `n` values (a multiple of the block size) from `src` into `dst`.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Quantizes `n` values with ember's reference quantizer (nearest-value rounding,
// the same choices as ggml's *_ref quantizers). Every weight type and Q8_0, Q8_1, Q8_K.
void quantize_row(DType type, const float* src, void* dst, int64_t n);

// The format activations are converted to before a dot product with weights of `weight_type`:
// Q8_0 for Q4_0, Q5_0, Q8_0; Q8_1 for Q4_1, Q5_1; Q8_K for Q4_K, Q5_K, Q6_K; F32 for F32, F16, BF16.
DType activation_type(DType weight_type);

// Dot product of one weight row (`n` values of `weight_type`) with one activation
// row already in activation_type(weight_type) (produced by quantize_row).
float dot_row(DType weight_type, const void* weights, const void* activations, int64_t n);

// Exact reference: dequantized weights times F32 activations, accumulated in double.
double dot_row_exact(DType weight_type, const void* weights, const float* activations, int64_t n);

}  // namespace ember::quant
