// The block quantizers `ember quantize` writes weights with, one per output type.
//
// Q4_0, Q4_1, Q5_0 and Q5_1 are lib/quant's reference quantizers (the rounding rules of
// ggml's quantize_row_*_ref). Q8_0 weights use ggml's file rule d = max|x| / 127,
// q = round-half-away(x / d) here: lib/quant's quantize_q8_0 is the activation rounding
// of llama.cpp's x86 kernels, which can differ in ties and in the scale's last bit.
// Q4_K, Q5_K, Q6_K are the searched quantizers of k_search.hpp. With these, the tensor
// data equals llama-quantize's (no importance matrix) byte for byte (tests/quantize).
#pragma once

#include <cstdint>

#include "quant/dtype.hpp"

namespace ember::quantize {

// True for the types quantize_values writes.
bool can_write(quant::DType type);

// Quantizes `n` values (a multiple of the type's block size) into `dst`
// (quant::row_bytes(type, n) bytes). F32, F16 and BF16 convert.
void quantize_values(quant::DType type, const float* src, void* dst, int64_t n);

// The Q8_0 weight quantizer (ggml's file rule, above).
void quantize_q8_0_weights(const float* src, void* dst, int64_t n);

}  // namespace ember::quantize
