// AWQ (Lin et al. 2023, "AWQ: Activation-aware Weight Quantization for LLM Compression
// and Acceleration") for `ember quantize --method awq`: per input channel c of a group of
// projections that read the same input, the weights are multiplied by a scale s_c before
// they are rounded, and the input is divided by s_c where it is made (a norm's weight, or
// the rows of ffn_up that feed ffn_down), so the unquantized product is unchanged and the
// channels that carry large activations keep more of their precision.
//
// The scales are s_c = a_c^alpha, normalised by sqrt(max s * min s), where a_c is the rms
// of the calibration inputs on channel c (sqrt(H[c][c] / rows), from the same Hessian
// H = sum x^T x that GPTQ uses; the paper takes the mean |x|). alpha is searched on a grid
// of `grid` points in [0, 1) (alpha = 0 is round-to-nearest) for the smallest layer-wise
// output error summed over the group's matrices,
//   loss = sum over rows r of e_r H e_r^T,  e_r = the row as a reader dequantizes it
//                                           (scales undone) minus the original row,
// evaluated on at most `search_rows` rows of each matrix (evenly spaced). Any type
// `quantize_values` writes can be the target, so the output is an ordinary GGUF file.
//
// Then AWQ's clipping search (the paper's second step): for the types whose grid is set
// by the block's extreme values (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_G128, Q4_G64), each
// block of each row (scaled) is clamped to +-r * max |w| of the block before it is
// rounded, r in {1, 0.95, ..., 0.5}, and the r of the smallest block-local output error
//   e_b H_bb e_b^T,  e_b = the block as a reader dequantizes it (scales undone) minus the
//                          original block, H_bb the block's square of H,
// is kept (ties: the larger r, so r = 1, no clipping, unless a smaller one is better).
// The K types are left alone: their searched quantizers already fit each sub-block's
// scale and minimum by weighted least squares, which trims extreme values where it pays.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.hpp"
#include "quant/dtype.hpp"
#include "quantize/calibration.hpp"
#include "quantize/output_error.hpp"
#include "quantize/type_rules.hpp"

namespace ember::quantize {

struct AwqOptions {
  // >= 0: SmoothQuant (Xiao et al. 2023) instead of the search: the scales are
  // s_c = a_c^alpha / w_c^(1 - alpha) for this alpha, w_c the largest |weight| of input
  // channel c over the group's matrices (row scales applied), normalised as above; it
  // moves the activation outliers of channel c into the weights, for W8A8 (Q8_W), whose
  // activations are quantized too. a_c is the channel's rms, as for AWQ (the paper: max |x|).
  double smooth_alpha = -1;
  // SmoothQuant with a search instead of a fixed alpha (smooth_alpha is then ignored): per
  // group, the statistic a_c (max |x|, the paper's, or the rms) and alpha in
  // {0.05, 0.10, ..., 1} are chosen, or no smoothing at all, for the smallest W8A8 output
  // error on the calibration rows the Hessian kept (Hessian::kept),
  //   loss = sum over kept rows x and searched weight rows w of (x_hat . w_hat - x . w)^2,
  // x_hat = x / s quantized as the matmul quantizes activations for the weight's type
  // (per token for Q8_W), w_hat = w * s quantized to that type (both dequantized).
  bool smooth_search = false;
  int grid = 20;                  // alpha in {0, 1/grid, ..., (grid-1)/grid}
  int64_t search_rows = 256;      // rows of each matrix the loss is evaluated on
  int threads = 1;                // candidates are spread over threads
  bool clip = true;               // the clipping search (AWQ only, not SmoothQuant)
};

struct AwqChoice {
  double alpha = 0;
  const char* statistic = "rms";      // SmoothQuant: the a_c used ("rms", "max"; "none": no smoothing)
  std::vector<float> scales;          // [cols], s_c for the chosen alpha
  double loss = 0, loss_rtn = 0;      // the chosen candidate's and alpha = 0's
};

// Searches alpha for one group; all matrices have cols == h.cols. `tie` (empty, or one id
// per column in [0, cols)) makes the columns of one id share one scale: their statistics
// are pooled (the rms over all their inputs, the largest |x|, the largest |weight|) before
// the scales are computed, for inputs whose scale must be undone in a shared place
// (attn_output's columns under grouped-query attention, undone in one value head's rows).
// Throws invalid_argument for mismatched sizes or options.
AwqChoice awq_choose_scales(std::span<const AwqMatrix> group, const Hessian& h, const AwqOptions& options,
                            std::span<const int64_t> tie = {});

// What the file writer applies: per quantized tensor, column scales and optional row
// scales; per folded 1-D tensor (a norm's weight), its new values (written as F32).
struct AwqTransform {
  std::vector<float> col_scale;       // [cols]
  std::vector<float> row_scale;       // [rows] or empty
  double alpha = 0;
  const char* statistic = "";          // SmoothQuant's a_c ("rms", "max", "none"); AWQ: ""
  std::shared_ptr<const Hessian> clip;   // the input's H for the clipping search, or null
};

// True for the types the clipping search applies to (above).
bool awq_can_clip(quant::DType type);

struct ClipCount {
  int64_t blocks = 0, clipped = 0;   // blocks searched, and those that kept an r < 1
};

// One row: `values` [cols] as given, `scale` [cols] the scales applied before rounding
// (row scale times column scale); writes the row's blocks of `type` to `dst` with the
// clipping search against `h` (cols x cols). `type` must satisfy awq_can_clip.
ClipCount awq_quantize_row_clipped(quant::DType type, const float* values, const float* scale, int64_t cols,
                                   const Hessian& h, void* dst);
struct AwqPlan {
  std::map<std::string, AwqTransform> transforms;
  std::map<std::string, std::vector<float>> folded;
  std::map<std::string, double> folded_alpha;
  std::map<std::string, std::string> folded_statistic;   // SmoothQuant: the group's a_c
  std::vector<std::string> skipped;   // groups left to round-to-nearest, with the reason
};

// Per layer: ffn_down (folded into ffn_up's rows), then ffn_gate + ffn_up (folded into
// ffn_norm), then, for SmoothQuant only, attn_output (folded into attn_v's rows and bias:
// attention is linear in the values, so dividing value channel d of a kv head by s_d
// divides the attention output of every query head reading it; the query heads that share
// a kv head share its scales, `tie` above), then attn_q + attn_k + attn_v (folded into
// attn_norm). A group is searched only when all its tensors are quantized, separate, seen
// by the calibration, and its fold target exists with the right length. AWQ leaves
// attn_output alone. `on_group` reports progress.
AwqPlan awq_plan(const gguf::File& file, std::span<const TensorPlan> plans, const Calibration& calibration,
                 const AwqOptions& options, const std::function<void(int64_t done, int64_t total)>& on_group = {});

}  // namespace ember::quantize
