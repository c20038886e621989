// GPTQ (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for Generative
// Pre-trained Transformers") onto the standard GGUF grids Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q4_K, Q5_K and Q6_K, so that the output is an ordinary tensor of that type any GGUF
// reader (llama.cpp included) loads, and onto ember's own asymmetric INT4 groups
// Q4_G128 / Q4_G64 and its per-row INT8 Q8_W.
//
// For a weight matrix W [rows][cols] (cols = the input width) and the Hessian of its
// layer-wise loss H = sum over calibration rows x of x^T x ([cols][cols]):
//   - dead columns (H[i][i] == 0: the input never feeds them) get H[i][i] = 1 and
//     W[:, i] = 0;
//   - the column order: left to right, or with act_order by decreasing H[i][i] (after
//     the dead-column rule; ties by column index). W's columns and H's rows and columns
//     are permuted into that order; the codes are written at the original positions;
//   - damping: H += lambda I with lambda = damp * mean(diag H) (damp = 0.01);
//   - U = the upper Cholesky factor of H^-1 (H^-1 = U^T U);
//   - columns are quantized in order; each row's value in column j is coded on its
//     block's grid and its error e = (w - dequantized) / U[j][j] is spread onto the
//     columns not yet quantized: W[:, k] -= e U[j][k] for k after j. The updates to
//     columns beyond the current batch of `block_columns` columns are applied once per
//     batch (the paper's lazy batch update), which changes only the order of additions;
//   - a block's grid (per row) is chosen when the first of its columns comes up, from
//     the current (error-updated) values of all its columns, none of which is quantized
//     yet. Without act_order that is when the block starts; with act_order a block's
//     columns are scattered over the order, and its grid is fixed when its column of
//     largest H[i][i] comes up (the block's other columns have received the updates of
//     every column quantized before that one);
//       Q4_0 (32 columns): llama.cpp's rule (quantize_row_q4_0_ref): d = the value of
//         largest magnitude / -8; each value gets q = min(15, (int8)(w / d + 8.5)),
//         clamped to [0, 15]; dequantized (q - 8) * fp16(d); Q5_0 the same with 32
//         levels (d = max / -16, + 16.5, q - 16);
//       Q4_1 / Q5_1 (32 columns): llama.cpp's rules: m = min, d = (max - min) / 15 (31);
//         q = min(15 (31), (int8)((w - m) / d + 0.5)), clamped at 0; dequantized
//         fp16(d) * q + fp16(m);
//       Q8_0 (32 columns): the file rule (weight_quantizers.hpp): d = max |w| / 127,
//         q = round-half-away(w / d) clamped to [-127, 127]; dequantized fp16(d) * q;
//       Q4_K (256 columns): the block as ember's searched Q4_K quantizer
//         (k_search.hpp: llama-quantize's bytes) writes it from those values: d, dmin,
//         the eight 6-bit sub-block scales and mins; each value then gets
//         q = clamp(round((w + dmin * m_s) / (d * sc_s)), 0, 15) for its sub-block s,
//         the searched quantizer's final recoding, and is dequantized
//         d * sc_s * q - dmin * m_s as a reader computes it. In a sub-block whose
//         step d * sc_s is 0 every value dequantizes to -dmin * m_s; its codes are
//         the searched quantizer's.
//       Q4_G128 / Q4_G64 (128 / 64 columns): ember's asymmetric groups
//         (lib/quant/q4_g.cpp): m = fp16(min), d = fp16((max - min) / 15) of those
//         values; each value gets q = clamp(round-half-even((w - m) / d), 0, 15) and is
//         dequantized d * q + m;
//       Q8_W (the whole row): d = max |w| / 127 of the row's values before any column
//         is quantized (GPTQ's static per-row grid); each value gets q = clamp(
//         round-half-even(w * 127 / max), -127, 127), dequantized fp16(d) * q;
//       Q5_K and Q6_K (256 columns): as Q4_K, from ember's searched Q5_K / Q6_K
//         quantizers, recoding each value as they do: Q5_K q = clamp(round((w + dmin *
//         m_s) / (d * sc_s)), 0, 31); Q6_K q = clamp(round(w / (d * sc_s)), -32, 31) + 32
//         for its sub-block s of 16, dequantized (d * sc_s) * (q - 32);
//     With a diagonal H no error reaches another column, and the bytes are exactly
//     round-to-nearest's.
// Rows are independent given H: they run in fixed chunks of 64 rows on `threads`
// threads, so the bytes do not depend on the thread count.
// Weights are updated in double precision.
#pragma once

#include <cstdint>

#include "quant/dtype.hpp"

namespace ember::quantize {

struct GptqOptions {
  double damp = 0.01;           // lambda = damp * mean(diag H), > 0
  int64_t block_columns = 128;  // lazy-update batch width, a positive multiple of 32
  bool act_order = false;       // columns in order of decreasing H[i][i] (see above)
  int threads = 1;              // threads for the rows (the Hessian is factored on the caller's)
};

// True for the types GPTQ writes: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K,
// Q4_G128, Q4_G64 and Q8_W.
bool gptq_can_write(quant::DType type);

// `weights`: [rows][cols] row-major; `hessian`: [cols][cols] row-major, symmetric
// (copied, not modified); `dst`: rows * quant::row_bytes(type, cols) bytes. cols must
// be a multiple of the type's block (32, 256 for the K types, 128 / 64 for Q4_G*). Throws unsupported for
// another type, invalid_argument for bad sizes or options, malformed_file for a
// non-finite weight or Hessian entry.
void gptq_quantize(quant::DType type, const float* weights, int64_t rows, int64_t cols, const double* hessian, void* dst,
                   const GptqOptions& options = {});

}  // namespace ember::quantize
