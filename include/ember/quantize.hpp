// Writing a quantized GGUF from a higher-precision one (`ember quantize`).
//
// Round-to-nearest GGUF types with llama.cpp's per-tensor rules: the tensor data of
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (and of the K types, whose scales are searched as
// llama.cpp searches them) is byte-identical to llama-quantize's from the same input.
// docs/quantization.md lists the recipes, the rules and measurements.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ember/export.hpp"

namespace ember {

// What to write (`--type`).
enum class QuantRecipe {
  q8_0, q4_0, q4_1, q5_0, q5_1,   // one 32-value block type (output / tied embedding: Q6_K or Q8_0)
  q4_k, q5_k, q6_k,               // one super-block type (same output rule; rows not a multiple of 256 fall back)
  q4_k_m, q5_k_m,                 // llama.cpp's mixtures: some attn_v / ffn_down layers in Q6_K
  q4_g128, q4_g64,                // ember's asymmetric INT4 groups (not GGUF types: only ember loads them);
                                  // output / tied embedding as the 32-value recipes
  q8_w,                           // ember's W8A8: INT8 weights with one scale per row, INT8 activations
                                  // with one scale per token (only ember loads it); output as above
  q8_wr,                          // Q8_W with weights and activations Hadamard-rotated per 32 values
                                  // (the activations' outlier channels spread over their group)
  f16,                            // no quantization: every weight (of any type ember reads) as F16,
                                  // llama-quantize's F16; the round-to-nearest method only
};

// "Q4_K_M" and the like; the parse is case-insensitive. nullopt for other names.
EMBER_API std::optional<QuantRecipe> parse_quant_recipe(std::string_view name);
EMBER_API const char* to_string(QuantRecipe recipe) noexcept;

// How the quantized values are chosen (`--method`).
enum class QuantMethod {
  rtn,    // round to nearest: llama-quantize's bytes
  gptq,   // GPTQ (Frantar et al. 2022) onto the planned type's grid (every GGUF block
          // type, Q4_G128, Q4_G64, Q8_W) with calibration Hessians; every recipe
  awq,    // AWQ (Lin et al. 2023): per-channel scales searched on calibration data, folded
          // into the norms / ffn_up rows before the projections; any recipe
  smoothquant,  // SmoothQuant (Xiao et al. 2023): AWQ's folding with the fixed-alpha scales
                // a_c^alpha / w_c^(1 - alpha) (smooth_alpha), for W8A8 (recipe Q8_W); any recipe
};

// Calibration progress: called after each sample, from the calling thread.
struct CalibrationProgress {
  int64_t sample = 0;             // samples done, 1-based
  int64_t samples = 0;            // samples in all
};

// How the mixed-precision planner and the gate rank tensors (`--sensitivity`).
enum class Sensitivity {
  proxy,  // relative layer-wise output error (mixing) / relative weight error (the gate): no model run
  kl,     // measured: KL divergence of the model's next-token distribution with the tensor
          // alone quantized, on a short slice of the calibration text (needs calibration_text)
};

// Search progress: AWQ calls it after each group of projections (three per layer), the
// mixed-precision planner after each tensor measured.
struct SearchProgress {
  int64_t group = 0;              // groups (tensors) done, 1-based
  int64_t groups = 0;             // in all
  const char* phase = "awq";      // "awq", "mix" or "kl" (a tensor's KL measured)
};

// One tensor of the output, as written.
struct QuantizedTensor {
  std::string name;
  std::vector<int64_t> shape;     // GGUF order: shape[0] is the row length
  std::string type_in;            // "F16"
  std::string type_out;           // "Q4_K"; equal to type_in when copied unchanged
  bool quantized = false;         // false: copied (norms, 1-D tensors, already the chosen type)
  bool gptq = false;              // quantized by GPTQ (else round-to-nearest)
  bool awq = false;               // AWQ: quantized after scaling its columns, or a norm weight divided by the scales
  double awq_alpha = 0;           // AWQ: the exponent chosen (0: the scales are 1, round-to-nearest)
  std::string smooth_statistic{}; // SmoothQuant: the activation statistic of the scales ("rms", "max", "none")
  double awq_clipped = 0;         // AWQ's clipping search: share of the blocks whose range was clipped
  bool fallback = false;          // rows not a multiple of the chosen type's block: a wider type was used
  uint64_t bytes_in = 0;          // data bytes in the input
  uint64_t bytes_out = 0;         // data bytes in the output
  // ||w - dequantize(quantize(w))|| / ||w|| over the tensor (0 when copied; 0 for an all-zero tensor).
  double relative_error = 0;
  bool mixed = false;             // its type chosen by the mixed-precision budget
  double sensitivity = 0;         // mixed: D in the chosen type (relative output error, or KL-scaled; mixed.hpp)
  // Sensitivity::kl: KL divergence (nats per scored token) with this tensor alone in
  // kl_type and every other tensor as in the input; kl < 0: not measured.
  double kl = -1;
  std::string kl_type{};
  std::string raised_from{};        // the gate raised it: its type before (empty: not raised)
};

// One tensor the gate raised in a round.
struct RaisedTensor {
  std::string name;
  std::string from, to;           // "Q4_0" -> "Q8_0"
  double rank_key = 0;            // what it was ranked by: its KL, or the proxy (relative weight error)
};

// One round of the gate: the tensors raised, then the output's perplexity.
struct GateRound {
  int round = 0;                  // 1-based
  std::vector<RaisedTensor> raised{};
  double perplexity = 0, error = 0;
  double rise = 0;                // perplexity / the input's - 1
};

// Progress: called once per tensor after it is done, in output order, from the calling thread.
struct QuantizeProgress {
  size_t index = 0;               // 0-based
  size_t count = 0;               // tensors in all
  const QuantizedTensor* tensor = nullptr;   // valid during the call
};

struct QuantizeOptions {
  QuantRecipe recipe = QuantRecipe::q4_k_m;   // the output type or mixture
  int threads = 1;                // worker threads for the rows of each tensor, >= 1 (1: the calling thread only)
  bool pure = false;              // every quantizable tensor in the recipe's base type (llama-quantize --pure)
  std::function<void(const QuantizeProgress&)> on_tensor;   // optional
  // --method gptq: any recipe (Q8_W too). Every tensor whose input the calibration saw
  // (the dense attention and feed-forward projections) is quantized by GPTQ onto its
  // planned type (a mixture's Q6_K layers and Q5_0 fallbacks too); the others (the
  // output matrix, embeddings, MoE experts) as by rtn. GPTQ runs on `threads` threads.
  // --method awq: any recipe; the q/k/v, gate/up and down projections of each layer are
  // quantized after AWQ's scaling, and attn_norm, ffn_norm (written as F32) and ffn_up's
  // rows absorb the inverse scales; everything else as by rtn.
  QuantMethod method = QuantMethod::rtn;
  std::string calibration_text;   // path of a UTF-8 text (gptq, awq: required)
  int64_t samples = 512;          // calibration windows, >= 1; fewer (with a warning) when the text is short
  int64_t sample_tokens = 512;    // tokens per window (BOS first), >= 2
  double damp = 0.01;             // GPTQ damping: lambda = damp * mean(diag H), > 0
  // GPTQ act-order: columns quantized in order of decreasing H[i][i] (each block's grid
  // chosen when its first column in that order comes up; docs/quantization.md). gptq only.
  bool act_order = false;
  // AWQ's clipping search after the scales (awq only; docs/quantization.md): per block of
  // Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_G*, the clamp ratio of smallest output error. On by default.
  bool awq_clip = true;
  // SmoothQuant's migration strength alpha in [0, 1] (smoothquant only; the paper's default
  // 0.5), or negative (smooth_alpha_search): per group of projections, alpha in
  // {0.05, ..., 1} and the activation statistic (max |x| or rms), or no smoothing, searched
  // for the smallest W8A8 output error on 256 kept calibration rows (docs/quantization.md).
  double smooth_alpha = 0.5;
  static constexpr double smooth_alpha_search = -1.0;
  // SmoothQuant's weights rounded by GPTQ instead of to nearest (smoothquant only; CLI
  // --gptq): each smoothed matrix w * s goes through GPTQ against the Hessian of its
  // smoothed input x / s, with damp and act_order as for --method gptq.
  bool smooth_gptq = false;
  std::function<void(const CalibrationProgress&)> on_calibration;   // optional
  std::function<void(const SearchProgress&)> on_search;            // optional (awq, mix, kl)
  // --sensitivity kl (docs/quantization.md): measured before mixing, for every quantized
  // tensor the model reads, on the first kl_windows windows of kl_window_tokens tokens of
  // the calibration text (the part calibration reads); the mixture and the gate then rank
  // by it. Needs calibration_text.
  Sensitivity sensitivity = Sensitivity::proxy;
  int64_t kl_windows = 2;         // >= 1
  int64_t kl_window_tokens = 256; // >= 16
  // Mixed precision by sensitivity (--budget SIZE, --bpw B; docs/quantization.md): the
  // layers' projections take types from a ladder (Q4_K..Q8_0 for K recipes, Q4_0/Q5_0/Q8_0
  // for the others) so that the tensor data fits budget_bytes, or target_bpw bits per
  // weight over all tensors, with the least relative output error (measured with the
  // calibration text's Hessians when calibration_text is set, else the weight error).
  uint64_t budget_bytes = 0;      // 0: no budget
  double target_bpw = 0;          // 0: no target; at most one of the two
  // --eval FILE: the perplexity of this text (llama-perplexity's scoring, ember/perplexity.hpp)
  // with the input and with the output, in the report.
  // The gate, max_ppl_rise R > 0: when the output's perplexity exceeds the input's by more
  // than the fraction R, the most sensitive quantized tensors are raised to the next wider
  // type (lib/quantize/gate.hpp), gate_step per round, and the perplexity measured again,
  // until it holds; when it cannot (every tensor at its widest, or gate_max_rounds spent)
  // OUT is not written (QuantizeReport::rejected; no exception: the figures are the answer).
  // Without eval_text the gate evaluates on the held-out tail of calibration_text: its
  // last hold_out fraction of tokens (at least eval_ctx), which calibration, AWQ/GPTQ and
  // the KL measurement do not read. The library's default is no gate; `ember quantize`
  // sets 5 % whenever it has a text to evaluate.
  std::string eval_text;          // empty: no evaluation file
  int32_t eval_ctx = 512;         // tokens per chunk, >= 8
  int64_t eval_chunks = -1;       // -1: every whole chunk of the text
  double max_ppl_rise = 0;        // 0: no gate; e.g. 0.05 for 5 %
  double hold_out = 0.10;         // the calibration text's evaluation tail, in (0, 0.5]
  int gate_step = 0;              // tensors raised per round, >= 0 (0: max(1, ceil(quantized tensors / 16)))
  int gate_max_rounds = 0;        // >= 0 (0: until every tensor is at its widest)
  // After each evaluated chunk: model 0 = the input, 1 = the output (again each round).
  std::function<void(int model, int64_t chunk, int64_t chunks)> on_eval;
  std::function<void(const GateRound&)> on_gate;   // after each round of the gate, optional
};

struct QuantizeReport {
  std::vector<QuantizedTensor> tensors;   // in output order
  uint64_t bytes_in = 0;          // tensor data of the input
  uint64_t bytes_out = 0;         // tensor data of the output
  uint64_t file_bytes = 0;        // size of the written file
  // sqrt(sum ||w - deq(q(w))||^2 / sum ||w||^2) over the quantized tensors.
  double relative_error = 0;
  uint32_t file_type = 0;         // general.file_type written (llama_ftype)
  int64_t calibration_samples = 0, calibration_tokens = 0;   // gptq/awq: what was run
  std::vector<std::string> awq_skipped;   // awq: projection groups left to round-to-nearest, and why
  // eval_text: perplexity with the input and the output, their standard errors, tokens scored.
  double ppl_before = 0, ppl_before_error = 0, ppl_after = 0, ppl_after_error = 0;
  int64_t eval_scored = 0;
  bool rejected = false;          // max_ppl_rise exceeded even after raising: OUT was not written
  double max_ppl_rise = 0;        // the gate's limit (0: no gate)
  double ppl_first = 0;           // the output's perplexity before the gate raised anything
  std::vector<GateRound> gate_rounds;   // in order; ppl_after is the last round's
  int64_t held_out_tokens = 0;    // the calibration text's tokens held out for evaluation (0: none)
  int64_t kl_windows = 0, kl_tokens = 0, kl_positions = 0;   // Sensitivity::kl: what was run and scored
  uint64_t budget_bytes = 0;      // the mixture's budget (from budget_bytes or target_bpw); 0: none
  // Things the caller should know, e.g. that the input was already quantized.
  std::vector<std::string> warnings;
  // IN was a Hugging Face checkpoint folder (this path), converted to GGUF first.
  std::string converted_from;
};

// Reads the GGUF `input` (or a Hugging Face checkpoint folder, converted first with
// convert_hf_checkpoint into a temporary file beside `output`; ember/convert.hpp) (F32/F16/BF16 tensors are the usual source; quantized tensors of
// a type ember reads are dequantized first, with a warning) and writes `output`: the same
// metadata plus general.file_type and general.quantization_version = 2, and the tensors in
// llama-quantize's order and types. The file is written to a temporary name in the output's
// folder and renamed when complete; on any error no output (and no temporary) is left.
// Throws ember::Error: invalid_argument (threads < 1), io (cannot read / write / rename,
// disk full), malformed_file (not GGUF, truncated, non-finite weights), unsupported
// (architecture ember does not know, a tensor type it cannot read, rows no type fits;
// gptq with the Q8_W recipe). gptq/awq: io for an unreadable
// calibration text, invalid_argument for one too short for a single sample, bad
// samples/damp, or act_order without gptq. The gate:
// invalid_argument for max_ppl_rise without a text to evaluate, a calibration text too
// short to hold out one eval_ctx chunk, bad hold_out/gate_step/gate_max_rounds;
// Sensitivity::kl: invalid_argument without a calibration text or one shorter than a window.
EMBER_API QuantizeReport quantize_model(const std::string& input, const std::string& output,
                                        const QuantizeOptions& options);

}  // namespace ember
