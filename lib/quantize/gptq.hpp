// GPTQ (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for Generative
// Pre-trained Transformers") onto the standard Q4_0 grid, so that the output is an
// ordinary Q4_0 tensor any GGUF reader (llama.cpp included) loads.
//
// For a weight matrix W [rows][cols] (cols = the input width) and the Hessian of its
// layer-wise loss H = sum over calibration rows x of x^T x ([cols][cols]):
//   - dead columns (H[i][i] == 0: the input never feeds them) get H[i][i] = 1 and
//     W[:, i] = 0;
//   - damping: H += lambda I with lambda = damp * mean(diag H) (damp = 0.01);
//   - U = the upper Cholesky factor of H^-1 (H^-1 = U^T U);
//   - columns are quantized left to right; each row's column j is rounded to the Q4_0
//     grid and its error e = (w - q) / U[j][j] is spread onto the columns not yet
//     quantized: W[:, k] -= e U[j][k] for k > j. The updates to columns beyond the
//     current batch of `block_columns` columns are applied once per batch (the paper's
//     lazy batch update), which changes only the order of the additions;
//   - the Q4_0 scale of each row's block of 32 columns is chosen when the block starts,
//     by llama.cpp's rule (quantize_row_q4_0_ref: d = the value of largest magnitude
//     / -8, q = min(15, (int8)(w / d + 8.5))) from the weights as updated by then; the
//     dequantized value used for the error is (q - 8) * fp16(d), what a reader computes.
// Weights are updated in double precision.
#pragma once

#include <cstdint>

namespace ember::quantize {

struct GptqOptions {
  double damp = 0.01;           // lambda = damp * mean(diag H), > 0
  int64_t block_columns = 128;  // lazy-update batch width, a multiple of 32
};

// `weights`: [rows][cols] row-major; `hessian`: [cols][cols] row-major, symmetric
// (copied, not modified); `dst`: rows * quant::row_bytes(q4_0, cols) bytes. cols must
// be a multiple of 32. Throws invalid_argument for bad sizes or options, malformed_file
// for a non-finite weight or Hessian entry.
void gptq_quantize_q4_0(const float* weights, int64_t rows, int64_t cols, const double* hessian, void* dst,
                        const GptqOptions& options = {});

}  // namespace ember::quantize
