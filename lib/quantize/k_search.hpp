// Searched-scale quantizers of the super-block ("K") formats Q4_K, Q5_K and Q6_K, as
// `ember quantize` writes them.
//
// lib/quant's quantize_q4_k/q5_k/q6_k round the sub-block scales to the nearest value
// (quick test data). These instead search each sub-block's scale (and min) for the
// smallest weighted squared error, the method of ggml's reference K quantizers
// (ggml-quants.c, quantize_row_q{4,5,6}_K_ref with no importance matrix), and perform
// the same float operations in the same order, so that the blocks are byte-identical
// to llama-quantize's. The arithmetic is described in docs/quantization.md.
//
// Compile without FMA contraction (lib/CMakeLists.txt sets -ffp-contract=off for
// lib/quantize): the order and rounding of every product and sum is part of the result.
#pragma once

#include <cstdint>

namespace ember::quantize {

// `n` values (a multiple of 256) of `src` into n / 256 blocks at `dst`.
void quantize_q4_k_searched(const float* src, void* dst, int64_t n);
void quantize_q5_k_searched(const float* src, void* dst, int64_t n);
void quantize_q6_k_searched(const float* src, void* dst, int64_t n);

}  // namespace ember::quantize
