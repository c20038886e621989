// ember::quantize_model (include/ember/quantize.hpp): plan the tensor types, quantize
// each tensor's rows on the requested threads, write the file under a temporary name in
// the output's folder and rename it into place.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <system_error>
#include <thread>

#include "common/fail.hpp"
#include "common/temp_file.hpp"
#include "ember/convert.hpp"
#include "ember/model.hpp"
#include "ember/perplexity.hpp"
#include "ember/quantize.hpp"
#include "gguf/gguf.hpp"
#include "model/arch.hpp"
#include "quant/quant.hpp"
#include "quantize/awq.hpp"
#include "quantize/calibration.hpp"
#include "quantize/gate.hpp"
#include "quantize/gptq.hpp"
#include "quantize/mixed.hpp"
#include "quantize/sensitivity.hpp"
#include "quantize/type_rules.hpp"
#include "quantize/weight_quantizers.hpp"
#include "tokenizer/tokenizer.hpp"

namespace ember {
namespace {

using quant::DType;
namespace fs = std::filesystem;

constexpr uint32_t kQuantizationVersion = 2;   // ggml's GGML_QNT_VERSION

quantize::Recipe to_internal(QuantRecipe r) {
  switch (r) {
    case QuantRecipe::q8_0: return quantize::Recipe::q8_0;
    case QuantRecipe::q4_0: return quantize::Recipe::q4_0;
    case QuantRecipe::q4_1: return quantize::Recipe::q4_1;
    case QuantRecipe::q5_0: return quantize::Recipe::q5_0;
    case QuantRecipe::q5_1: return quantize::Recipe::q5_1;
    case QuantRecipe::q4_k: return quantize::Recipe::q4_k;
    case QuantRecipe::q5_k: return quantize::Recipe::q5_k;
    case QuantRecipe::q6_k: return quantize::Recipe::q6_k;
    case QuantRecipe::q4_k_m: return quantize::Recipe::q4_k_m;
    case QuantRecipe::q5_k_m: return quantize::Recipe::q5_k_m;
    case QuantRecipe::q4_g128: return quantize::Recipe::q4_g128;
    case QuantRecipe::q4_g64: return quantize::Recipe::q4_g64;
    case QuantRecipe::q8_w: return quantize::Recipe::q8_w;
    case QuantRecipe::q8_wr: return quantize::Recipe::q8_wr;
    case QuantRecipe::f16: return quantize::Recipe::f16;
  }
  fail(ErrorCode::invalid_argument, "quantize: unknown recipe {}", int(r));
}

std::string read_text(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in || in.bad()) fail(ErrorCode::io, "quantize: cannot read the {} text '{}'", what, path);
  return text.str();
}

int64_t metadata_int_or(const gguf::File& file, const std::string& key, int64_t fallback) {
  const gguf::Value* v = file.find(key);
  return v && v->is_integer() ? v->as_int(key) : fallback;
}

// Keys llama-quantize drops or rewrites; general.alignment is written by the Writer.
bool copied_key(std::string_view key) {
  return key != "general.file_type" && key != "general.quantization_version" && key != "general.alignment" &&
         key != "split.no" && key != "split.count" && key != "split.tensors.count";
}

struct RowSums {
  double error2 = 0, norm2 = 0;
  int64_t blocks = 0, clipped = 0;   // AWQ's clipping search: blocks searched, blocks clipped
};

// Quantizes the rows [row_begin, row_end) of `t` into `out` and measures the error.
// With an AWQ transform the row quantized is w * row_scale[r] * col_scale[c], and the
// error is measured after undoing both (what the model computes with the folded input).
RowSums quantize_rows(const gguf::TensorInfo& t, DType type, std::byte* out, int64_t row_begin, int64_t row_end,
                      const quantize::AwqTransform* awq) {
  const int64_t cols = t.cols();
  const size_t in_row = quant::row_bytes(t.type, cols), out_row = quant::row_bytes(type, cols);
  std::vector<float> values(static_cast<size_t>(cols)), back(static_cast<size_t>(cols)), scaled;
  std::vector<float> scale;   // per column: row_scale[r] * col_scale[c]
  RowSums sums;
  for (int64_t r = row_begin; r < row_end; ++r) {
    quant::dequantize_row(t.type, t.data + size_t(r) * in_row, values.data(), cols);
    for (int64_t i = 0; i < cols; ++i)
      if (!std::isfinite(values[size_t(i)]))
        fail(ErrorCode::malformed_file, "quantize: tensor '{}' holds a non-finite value ({}) in row {}", t.name,
             values[size_t(i)], r);
    std::byte* dst = out + size_t(r) * out_row;
    if (awq) {
      const float rs = awq->row_scale.empty() ? 1.0f : awq->row_scale[size_t(r)];
      scale.resize(size_t(cols));
      scaled.resize(size_t(cols));
      for (int64_t i = 0; i < cols; ++i) {
        scale[size_t(i)] = rs * awq->col_scale[size_t(i)];
        scaled[size_t(i)] = values[size_t(i)] * scale[size_t(i)];
      }
      if (awq->clip && quantize::awq_can_clip(type)) {
        const quantize::ClipCount c = quantize::awq_quantize_row_clipped(type, values.data(), scale.data(), cols, *awq->clip, dst);
        sums.blocks += c.blocks;
        sums.clipped += c.clipped;
      } else {
        quantize::quantize_values(type, scaled.data(), dst, cols);
      }
    } else {
      quantize::quantize_values(type, values.data(), dst, cols);
    }
    quant::dequantize_row(type, dst, back.data(), cols);
    if (awq)
      for (int64_t i = 0; i < cols; ++i) back[size_t(i)] /= scale[size_t(i)];
    for (int64_t i = 0; i < cols; ++i) {
      const double w = values[size_t(i)], e = w - double(back[size_t(i)]);
      sums.error2 += e * e;
      sums.norm2 += w * w;
    }
  }
  return sums;
}

// All rows of `t` on `threads` threads (contiguous row ranges); the sums are added in
// thread order.
RowSums quantize_tensor(const gguf::TensorInfo& t, DType type, std::byte* out, int threads,
                        const quantize::AwqTransform* awq = nullptr) {
  const int64_t rows = t.rows();
  const int n = int(std::max<int64_t>(1, std::min<int64_t>(threads, rows)));
  if (n == 1) return quantize_rows(t, type, out, 0, rows, awq);
  std::vector<RowSums> sums(static_cast<size_t>(n));
  quantize::run_parallel(n, [&](int i) { sums[size_t(i)] = quantize_rows(t, type, out, rows * i / n, rows * (i + 1) / n, awq); });
  RowSums total;
  for (const RowSums& s : sums) {
    total.error2 += s.error2, total.norm2 += s.norm2;
    total.blocks += s.blocks, total.clipped += s.clipped;
  }
  return total;
}

// All rows of `t` by GPTQ onto `type` with the calibration Hessian `h`. With a
// SmoothQuant / AWQ transform (scales folded elsewhere) GPTQ quantizes w * row_scale[r] *
// col_scale[c] against the Hessian of the scaled input x / col_scale, H[i][j] /
// (col_scale[i] col_scale[j]), and the error is measured after undoing the scales.
RowSums gptq_tensor(const gguf::TensorInfo& t, DType type, const quantize::Hessian& h,
                    const quantize::GptqOptions& gptq_options, std::byte* out,
                    const quantize::AwqTransform* awq = nullptr) {
  const int64_t rows = t.rows(), cols = t.cols();
  const size_t in_row = quant::row_bytes(t.type, cols), out_row = quant::row_bytes(type, cols);
  std::vector<float> values(static_cast<size_t>(rows * cols)), back(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = values.data() + r * cols;
    quant::dequantize_row(t.type, t.data + size_t(r) * in_row, row, cols);
    for (int64_t i = 0; i < cols; ++i)
      if (!std::isfinite(row[i]))
        fail(ErrorCode::malformed_file, "quantize: tensor '{}' holds a non-finite value ({}) in row {}", t.name, row[i], r);
  }
  const auto scale_of = [&](int64_t r, int64_t c) {
    return awq ? (awq->row_scale.empty() ? 1.0f : awq->row_scale[size_t(r)]) * awq->col_scale[size_t(c)] : 1.0f;
  };
  if (awq) {
    std::vector<float> scaled(values.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) scaled[size_t(r * cols + c)] = values[size_t(r * cols + c)] * scale_of(r, c);
    std::vector<double> hs(h.h.size());
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t j = 0; j < cols; ++j)
        hs[size_t(i * cols + j)] = h.h[size_t(i * cols + j)] / (double(awq->col_scale[size_t(i)]) * awq->col_scale[size_t(j)]);
    quantize::gptq_quantize(type, scaled.data(), rows, cols, hs.data(), out, gptq_options);
  } else {
    quantize::gptq_quantize(type, values.data(), rows, cols, h.h.data(), out, gptq_options);
  }
  RowSums sums;
  for (int64_t r = 0; r < rows; ++r) {
    quant::dequantize_row(type, out + size_t(r) * out_row, back.data(), cols);
    for (int64_t i = 0; i < cols; ++i) {
      const double w = values[size_t(r * cols + i)], e = w - double(back[size_t(i)]) / scale_of(r, i);
      sums.error2 += e * e;
      sums.norm2 += w * w;
    }
  }
  return sums;
}

// The gate's rounds (quantize/gate.hpp): the quantized tensors ranked by their measured
// KL (those measured first), else by the proxy, their relative weight error; each round
// raises the next `step` of them one type wider through `raise` and measures through
// `measure` (true when the rise holds). Returns false when nothing is left to raise or
// gate_max_rounds are spent.
bool raise_until_holds(const gguf::File& file, std::span<const quantize::TensorPlan> plans,
                       const std::map<size_t, double>& kl, const QuantizeOptions& options, QuantizeReport& report,
                       const std::function<void(size_t, DType)>& raise, const std::function<bool()>& measure) {
  std::vector<size_t> ranked;
  std::vector<double> key(plans.size(), 0.0);
  std::vector<char> measured(plans.size(), 0);
  std::vector<DType> current(plans.size());
  for (size_t k = 0; k < plans.size(); ++k) {
    current[k] = plans[k].type;
    if (!plans[k].quantize) continue;
    const auto it = kl.find(plans[k].index);
    measured[k] = it != kl.end();
    key[k] = measured[k] ? it->second : report.tensors[k].relative_error;
    ranked.push_back(k);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) {
    if (measured[a] != measured[b]) return measured[a] > measured[b];
    return key[a] > key[b];
  });
  const size_t step =
      options.gate_step > 0 ? size_t(options.gate_step) : std::max<size_t>(1, (ranked.size() + 15) / 16);
  const auto wider = [&](size_t k) {
    const gguf::TensorInfo& t = file.tensors()[plans[k].index];
    return quantize::wider_type(current[k], t.type, t.cols());
  };
  quantize::RaiseOrder order(ranked);
  for (int round = 1;; ++round) {
    if (options.gate_max_rounds > 0 && round > options.gate_max_rounds) return false;
    const std::vector<size_t> picks = order.next(step, [&](size_t k) { return wider(k).has_value(); });
    if (picks.empty()) return false;
    GateRound r{.round = round};
    for (size_t k : picks) {
      const DType to = *wider(k);
      r.raised.push_back({.name = report.tensors[k].name,
                          .from = std::string(quant::type_name(current[k])),
                          .to = std::string(quant::type_name(to)),
                          .rank_key = key[k]});
      raise(k, to);
      current[k] = to;
    }
    const bool holds = measure();
    r.perplexity = report.ppl_after;
    r.error = report.ppl_after_error;
    r.rise = report.ppl_after / report.ppl_before - 1.0;
    report.gate_rounds.push_back(std::move(r));
    if (options.on_gate) options.on_gate(report.gate_rounds.back());
    if (holds) return true;
  }
}

}  // namespace

std::optional<QuantRecipe> parse_quant_recipe(std::string_view name) {
  static constexpr QuantRecipe kAll[] = {QuantRecipe::q8_0, QuantRecipe::q4_0, QuantRecipe::q4_1, QuantRecipe::q5_0,
                                         QuantRecipe::q5_1, QuantRecipe::q4_k, QuantRecipe::q5_k, QuantRecipe::q6_k,
                                         QuantRecipe::q4_k_m, QuantRecipe::q5_k_m, QuantRecipe::q4_g128,
                                         QuantRecipe::q4_g64, QuantRecipe::q8_w, QuantRecipe::q8_wr, QuantRecipe::f16};
  const quantize::RecipeInfo* info = quantize::find_recipe(name);
  if (!info) return std::nullopt;
  for (QuantRecipe r : kAll)
    if (to_internal(r) == info->recipe) return r;
  return std::nullopt;
}

const char* to_string(QuantRecipe recipe) noexcept {
  try {
    return quantize::recipe_info(to_internal(recipe)).name.data();   // the names are literals
  } catch (...) {
    return "unknown";
  }
}

namespace {

QuantizeReport quantize_gguf(const std::string& input, const std::string& output, const QuantizeOptions& options) {
  require(options.threads >= 1, "quantize: threads is {}, must be at least 1", options.threads);
  require(!output.empty(), "quantize: the output path is empty");
  const quantize::RecipeInfo& recipe = quantize::recipe_info(to_internal(options.recipe));
  const bool smooth = options.method == QuantMethod::smoothquant;
  require(!options.smooth_gptq || smooth, "quantize: smooth_gptq (--gptq) is used by --method smoothquant only");
  const bool gptq = options.method == QuantMethod::gptq || (smooth && options.smooth_gptq);
  const bool awq = options.method == QuantMethod::awq || smooth;   // SmoothQuant: AWQ's folding, fixed scales
  if (gptq || awq) {
    const char* method = gptq ? "gptq" : smooth ? "smoothquant" : "awq";
    if (smooth)
      require(options.smooth_alpha <= 1 && !std::isnan(options.smooth_alpha),
              "quantize: smooth_alpha is {}, must be in [0, 1] (or negative: searched)", options.smooth_alpha);
    if (gptq && !quantize::gptq_can_write(recipe.base))
      fail(ErrorCode::unsupported,
           "quantize: --method gptq writes the GGUF block types, Q4_G128 / Q4_G64 and Q8_W, not {}",
           recipe.name);
    require(!options.calibration_text.empty(), "quantize: --method {} needs a calibration text (--calib FILE)", method);
    require(options.samples >= 1, "quantize: samples is {}, must be at least 1", options.samples);
    require(options.sample_tokens >= 2, "quantize: sample_tokens is {}, must be at least 2", options.sample_tokens);
    require(options.damp > 0 && std::isfinite(options.damp), "quantize: damp is {}, must be > 0", options.damp);
  } else {
    require(options.method == QuantMethod::rtn, "quantize: unknown method {}", int(options.method));
  }
  require(!options.act_order || gptq, "quantize: act_order (--act-order) is used by --method gptq only (and smoothquant with smooth_gptq)");
  require(options.target_bpw >= 0 && std::isfinite(options.target_bpw), "quantize: target_bpw is {}, must be >= 0",
          options.target_bpw);
  require(options.budget_bytes == 0 || options.target_bpw == 0, "quantize: give a byte budget or a bits-per-weight target, not both");
  const bool mix = options.budget_bytes > 0 || options.target_bpw > 0;
  require(!mix || !options.pure, "quantize: --pure and a mixed-precision budget exclude each other");
  require(options.max_ppl_rise >= 0 && std::isfinite(options.max_ppl_rise), "quantize: max_ppl_rise is {}, must be >= 0",
          options.max_ppl_rise);
  require(options.max_ppl_rise == 0 || !options.eval_text.empty() || !options.calibration_text.empty(),
          "quantize: --max-ppl-rise needs an evaluation text (--eval FILE) or a calibration text to hold a part "
          "of out (--calib FILE)");
  require(options.eval_ctx >= 8, "quantize: eval_ctx is {}, must be at least 8", options.eval_ctx);
  require(options.hold_out > 0 && options.hold_out <= 0.5, "quantize: hold_out is {}, must be in (0, 0.5]",
          options.hold_out);
  require(options.gate_step >= 0, "quantize: gate_step is {}, must be >= 0", options.gate_step);
  require(options.gate_max_rounds >= 0, "quantize: gate_max_rounds is {}, must be >= 0", options.gate_max_rounds);
  const bool measure_kl = options.sensitivity == Sensitivity::kl;
  const bool to_f16 = recipe.base == DType::f16;   // a conversion: nothing is quantized
  require(!to_f16 || (options.method == QuantMethod::rtn && !mix && !measure_kl),
          "quantize: F16 converts every weight to F16 and quantizes nothing: --method, --budget / --bpw and "
          "--sensitivity kl do not apply to it");
  require(options.sensitivity == Sensitivity::proxy || measure_kl, "quantize: unknown sensitivity {}",
          int(options.sensitivity));
  require(!measure_kl || !options.calibration_text.empty(),
          "quantize: --sensitivity kl needs a calibration text (--calib FILE)");
  require(!measure_kl || (options.kl_windows >= 1 && options.kl_window_tokens >= 16),
          "quantize: kl_windows is {} (>= 1) and kl_window_tokens {} (>= 16)", options.kl_windows,
          options.kl_window_tokens);
  std::string eval_text;
  if (!options.eval_text.empty()) {
    eval_text = read_text(options.eval_text, "evaluation");
    if (!eval_text.empty() && eval_text.back() == '\n') eval_text.pop_back();
  }

  const auto file_ptr = std::make_shared<const gguf::File>(gguf::File::open(input));
  const gguf::File& file = *file_ptr;
  if (const gguf::Value* split = file.find("split.count"); split && split->is_integer() && split->as_int() > 1)
    fail(ErrorCode::unsupported, "quantize: '{}' is part {} of a model split into {} files; merge it first (llama-gguf-split --merge)",
         input, metadata_int_or(file, "split.no", 0) + 1, split->as_int());
  const std::string arch(file.get_string("general.architecture"));
  if (!model::find_arch(arch)) {
    std::string known;
    for (const model::ArchTraits& a : model::supported_archs()) known += (known.empty() ? "" : ", ") + std::string(a.name);
    fail(ErrorCode::unsupported, "quantize: '{}' has architecture '{}', which ember does not support ({})", input, arch,
         known);
  }
  quantize::ModelFacts facts{.arch = arch,
                             .n_layer = int64_t(file.get_uint(arch + ".block_count")),
                             .n_expert = metadata_int_or(file, arch + ".expert_count", 0),
                             .n_head = metadata_int_or(file, arch + ".attention.head_count", 0),
                             .n_head_kv = metadata_int_or(file, arch + ".attention.head_count_kv", 0)};

  std::vector<quantize::TensorShape> shapes;
  for (size_t i = 0; i < file.tensors().size(); ++i) {
    const gguf::TensorInfo& t = file.tensors()[i];
    shapes.push_back({.name = t.name, .type = t.type, .shape = t.shape, .index = i});
  }
  std::vector<quantize::TensorPlan> plans = quantize::plan_types(shapes, facts, recipe.recipe, options.pure);

  QuantizeReport report;
  report.file_type = recipe.file_type;
  size_t requantized = 0;
  for (const quantize::TensorPlan& plan : plans) {
    const gguf::TensorInfo& t = file.tensors()[plan.index];
    if (!plan.quantize) continue;
    const bool readable = quant::is_float_type(t.type) || quant::type_info(t.type).weight_supported;
    if (!readable)
      fail(ErrorCode::unsupported, "quantize: tensor '{}' is {}, which ember cannot read to requantize", t.name,
           quant::type_name(t.type));
    if (!quantize::can_write(plan.type))
      fail(ErrorCode::unsupported, "quantize: tensor '{}' would be {}, which ember cannot write", t.name,
           quant::type_name(plan.type));
    if (!quant::is_float_type(t.type)) ++requantized;
  }
  if (requantized > 0 && to_f16)
    report.warnings.push_back(fmt::format(
        "{} of the tensors are quantized: they are dequantized and rounded to F16, which does not bring back the "
        "weights they were quantized from",
        requantized));
  else if (requantized > 0)
    report.warnings.push_back(fmt::format(
        "{} of the tensors to quantize are already quantized: they are dequantized and quantized again, which loses "
        "more accuracy than quantizing the original weights",
        requantized));
  if (quant::is_ember_weight_type(recipe.base))
    report.warnings.push_back(fmt::format(
        "{} is ember's own tensor type, not a GGUF one: only ember loads this file (llama.cpp rejects it)",
        quant::type_name(recipe.base)));

  TempFile temp(output, "quantize");   // fails here, before any work, when the folder cannot be written

  // The calibration text's tokens when the held-out tail or the KL slice needs them: the
  // gate's default evaluation text is its last hold_out fraction (at least one chunk of
  // eval_ctx), which nothing before the gate reads.
  const bool hold_out = options.max_ppl_rise > 0 && eval_text.empty() && !options.calibration_text.empty();
  std::vector<int32_t> calib_tokens, held_tokens;
  int64_t calib_limit = -1;
  if (hold_out || measure_kl) {
    const tok::Tokenizer tokenizer = tok::Tokenizer::from_gguf(file);
    calib_tokens = tokenizer.encode(read_text(options.calibration_text, "calibration"), false, false);
    if (hold_out) {
      const auto n = int64_t(calib_tokens.size());
      const int64_t held = std::max<int64_t>(int64_t(std::ceil(double(n) * options.hold_out)), options.eval_ctx);
      if (held >= n)
        fail(ErrorCode::invalid_argument,
             "quantize: the calibration text '{}' has {} tokens, too few to hold out {} ({} % and at least one "
             "--eval-ctx chunk of {}) for the perplexity gate and calibrate on the rest; give --eval FILE, a longer "
             "text, or switch the gate off (--no-gate)",
             options.calibration_text, n, held, 100.0 * options.hold_out, options.eval_ctx);
      calib_limit = n - held;
      if (tokenizer.bos() >= 0 && tokenizer.adds_bos()) held_tokens.push_back(tokenizer.bos());
      held_tokens.insert(held_tokens.end(), calib_tokens.begin() + calib_limit, calib_tokens.end());
      calib_tokens.resize(size_t(calib_limit));
      report.held_out_tokens = held;
    }
  }

  quantize::Calibration calibration;
  quantize::AwqPlan awq_plan;
  if (gptq || awq || (mix && !options.calibration_text.empty())) {
    calibration = quantize::calibrate(
        file_ptr, {.text_path = options.calibration_text,
                   .samples = options.samples,
                   .sample_tokens = options.sample_tokens,
                   .threads = options.threads,
                   .max_tokens = calib_limit,
                   .keep_rows = smooth && options.smooth_alpha < 0 ? 256 : 0,
                   .on_sample = [&](int64_t done, int64_t total) {
                     if (options.on_calibration) options.on_calibration({.sample = done, .samples = total});
                   }});
    report.calibration_samples = calibration.samples;
    report.calibration_tokens = calibration.tokens;
    for (std::string& w : calibration.warnings) report.warnings.push_back(std::move(w));
  }
  // Measured sensitivity: every quantized tensor in the type it would have at the low end
  // (a mixture's first type, else its planned type).
  std::map<size_t, double> kl;            // by tensor index in the file
  std::map<size_t, DType> kl_type;
  if (measure_kl) {
    std::vector<size_t> low;
    if (mix) low = quantize::mixable(file, plans, recipe.base);
    std::vector<quantize::KlTarget> targets;
    for (size_t k = 0; k < plans.size(); ++k) {
      if (!plans[k].quantize) continue;
      const DType type = std::binary_search(low.begin(), low.end(), k) ? quantize::mix_ladder(recipe.base)[0] : plans[k].type;
      targets.push_back({.tensor = plans[k].index, .type = type});
      kl_type[plans[k].index] = type;
    }
    const quantize::KlResult measured = quantize::measure_kl(
        file_ptr, calib_tokens, targets,
        {.windows = options.kl_windows,
         .window_tokens = options.kl_window_tokens,
         .threads = options.threads,
         .on_tensor = [&](int64_t done, int64_t total) {
           if (options.on_search) options.on_search({.group = done, .groups = total, .phase = "kl"});
         }});
    kl = measured.kl;
    report.kl_windows = measured.windows;
    report.kl_tokens = measured.tokens;
    report.kl_positions = measured.positions;
  }
  std::map<size_t, double> sensitivity;   // by plan index: the mixed tensors
  if (mix) {
    uint64_t budget = options.budget_bytes;
    if (options.target_bpw > 0) {
      double elements = 0;
      for (const gguf::TensorInfo& t : file.tensors()) elements += double(t.n_elements);
      budget = uint64_t(options.target_bpw * elements / 8.0);
    }
    report.budget_bytes = budget;
    const auto chosen = quantize::mix_types(
        file, plans, gptq || awq || !options.calibration_text.empty() ? &calibration : nullptr, recipe.base,
        {.budget_bytes = budget, .threads = options.threads, .measured = measure_kl ? &kl : nullptr},
        [&](int64_t done, int64_t total) {
          if (options.on_search) options.on_search({.group = done, .groups = total, .phase = "mix"});
        });
    for (const quantize::MixChoice& c : chosen) sensitivity[c.plan] = c.sensitivity;
  }
  if (awq) {
    awq_plan = quantize::awq_plan(file, plans, calibration,
                                  {.smooth_alpha = smooth ? std::max(0.0, options.smooth_alpha) : -1.0,
                                   .smooth_search = smooth && options.smooth_alpha < 0, .threads = options.threads,
                                   .clip = options.awq_clip},
                                  [&](int64_t done, int64_t total) {
                                    if (options.on_search) options.on_search({.group = done, .groups = total, .phase = "awq"});
                                  });
    report.awq_skipped = std::move(awq_plan.skipped);
  }

  // Each tensor's output bytes: the input's or AWQ's folded norm (viewed), or quantized (owned).
  struct Written {
    DType type = DType::f32;
    std::vector<std::byte> owned;
    std::span<const std::byte> bytes;
    RowSums sums;
  };
  std::vector<Written> written(plans.size());
  const auto quantize_into = [&](size_t k, DType type, bool use_gptq) {
    const gguf::TensorInfo& t = file.tensors()[plans[k].index];
    Written& w = written[k];
    w.type = type;
    w.owned.assign(quant::row_bytes(type, t.cols()) * size_t(t.rows()), std::byte{0});
    const auto transform = awq_plan.transforms.find(t.name);
    const quantize::AwqTransform* awq_transform = transform != awq_plan.transforms.end() ? &transform->second : nullptr;
    w.sums = use_gptq ? gptq_tensor(t, type, *calibration.hessians.at(t.name),
                                    {.damp = options.damp, .act_order = options.act_order, .threads = options.threads},
                                    w.owned.data(), awq_transform)
                      : quantize_tensor(t, type, w.owned.data(), options.threads, awq_transform);
    w.bytes = w.owned;
  };
  for (size_t k = 0; k < plans.size(); ++k) {
    const quantize::TensorPlan& plan = plans[k];
    const gguf::TensorInfo& t = file.tensors()[plan.index];
    const auto mixed = sensitivity.find(k);
    QuantizedTensor q{.name = t.name,
                      .shape = t.shape,
                      .type_in = std::string(quant::type_name(t.type)),
                      .type_out = std::string(quant::type_name(plan.type)),
                      .quantized = plan.quantize,
                      .fallback = plan.fallback,
                      .bytes_in = t.n_bytes,
                      .mixed = mixed != sensitivity.end(),
                      .sensitivity = mixed != sensitivity.end() ? mixed->second : 0.0};
    if (const auto measured = kl.find(plan.index); measured != kl.end()) {
      q.kl = measured->second;
      q.kl_type = quant::type_name(kl_type.at(plan.index));
    }
    Written& w = written[k];
    if (const auto folded = awq_plan.folded.find(t.name); folded != awq_plan.folded.end()) {
      // A norm's weight divided by the AWQ scales of the projections it feeds.
      w.type = DType::f32;
      w.bytes = std::as_bytes(std::span(folded->second));
      q.type_out = quant::type_name(DType::f32);
      q.awq = true;
      q.awq_alpha = awq_plan.folded_alpha.at(t.name);
      q.smooth_statistic = awq_plan.folded_statistic.at(t.name);
    } else if (!plan.quantize) {
      w.type = t.type;
      w.bytes = std::span(t.data, t.n_bytes);
    } else {
      const auto hessian = calibration.hessians.find(t.name);
      // GPTQ where the planned type is one it writes (every GGUF block type and Q4_G*:
      // a mixture's Q6_K and Q5_0 fallbacks too) and the calibration saw the input.
      q.gptq = gptq && quantize::gptq_can_write(plan.type) && hessian != calibration.hessians.end() &&
               hessian->second->cols == t.cols();
      const auto transform = awq_plan.transforms.find(t.name);
      q.awq = transform != awq_plan.transforms.end();
      q.awq_alpha = q.awq ? transform->second.alpha : 0.0;
      q.smooth_statistic = q.awq ? transform->second.statistic : "";
      quantize_into(k, plan.type, q.gptq);
      q.awq_clipped = w.sums.blocks > 0 ? double(w.sums.clipped) / double(w.sums.blocks) : 0.0;
      q.relative_error = w.sums.norm2 > 0 ? std::sqrt(w.sums.error2 / w.sums.norm2) : 0.0;
    }
    q.bytes_out = w.bytes.size();
    report.tensors.push_back(std::move(q));
    if (options.on_tensor) options.on_tensor({.index = k, .count = plans.size(), .tensor = &report.tensors.back()});
  }
  const auto totals = [&] {
    double error2 = 0, norm2 = 0;
    report.bytes_in = report.bytes_out = 0;
    for (size_t k = 0; k < plans.size(); ++k) {
      error2 += written[k].sums.error2;
      norm2 += written[k].sums.norm2;
      report.bytes_in += report.tensors[k].bytes_in;
      report.bytes_out += report.tensors[k].bytes_out;
    }
    report.relative_error = norm2 > 0 ? std::sqrt(error2 / norm2) : 0.0;
  };
  const auto write_output = [&] {
    gguf::Writer writer(file.alignment());
    for (const gguf::KeyValue& kv : file.metadata())
      if (copied_key(kv.key)) writer.add(kv.key, kv.value);
    writer.add_uint32("general.quantization_version", kQuantizationVersion);
    writer.add_uint32("general.file_type", recipe.file_type);
    for (size_t k = 0; k < plans.size(); ++k) {
      const gguf::TensorInfo& t = file.tensors()[plans[k].index];
      writer.add_tensor(t.name, written[k].type, t.shape, written[k].bytes);
    }
    try {
      writer.write(temp.path());
    } catch (const Error& e) {
      fail(e.code(), "quantize: cannot write '{}': {}", output, e.what());
    }
    std::error_code ec;
    report.file_bytes = fs::file_size(temp.path(), ec);
  };
  totals();
  write_output();

  if (!eval_text.empty() || !held_tokens.empty()) {
    // Both models through ember's own forward pass, one after the other.
    const auto eval = [&](const fs::path& path, int which) {
      ModelOptions model_options;
      model_options.threads = options.threads;
      const auto model = Model::load(path, model_options);
      PerplexityOptions eval_options;
      eval_options.ctx = options.eval_ctx;
      eval_options.max_chunks = options.eval_chunks;
      eval_options.on_chunk = [&](int64_t c, int64_t n, double) {
        if (options.on_eval) options.on_eval(which, c, n);
      };
      return eval_text.empty() ? perplexity(*model, held_tokens, eval_options)
                               : perplexity(*model, std::string_view(eval_text), eval_options);
    };
    const PerplexityResult before = eval(input, 0);
    report.ppl_before = before.perplexity;
    report.ppl_before_error = before.error;
    const auto measure_after = [&] {
      const PerplexityResult after = eval(temp.path(), 1);
      report.ppl_after = after.perplexity;
      report.ppl_after_error = after.error;
      report.eval_scored = after.scored;
    };
    measure_after();
    report.ppl_first = report.ppl_after;
    report.max_ppl_rise = options.max_ppl_rise;
    const auto holds = [&] {
      return options.max_ppl_rise == 0 || report.ppl_after <= report.ppl_before * (1.0 + options.max_ppl_rise);
    };
    if (!holds()) {
      report.rejected = !raise_until_holds(file, plans, kl, options, report, [&](size_t k, DType type) {
        quantize_into(k, type, false);
        QuantizedTensor& q = report.tensors[k];
        if (q.raised_from.empty()) q.raised_from = q.type_out;
        q.type_out = quant::type_name(type);
        q.gptq = false;
        q.bytes_out = written[k].bytes.size();
        q.relative_error = written[k].sums.norm2 > 0 ? std::sqrt(written[k].sums.error2 / written[k].sums.norm2) : 0.0;
      }, [&] {
        totals();
        write_output();
        measure_after();
        return holds();
      });
      if (report.rejected) return report;   // the temporary is removed by its destructor
    }
  }
  temp.commit();
  return report;
}

}  // namespace

QuantizeReport quantize_model(const std::string& input, const std::string& output, const QuantizeOptions& options) {
  if (!is_hf_checkpoint(input)) return quantize_gguf(input, output, options);
  require(options.threads >= 1, "quantize: threads is {}, must be at least 1", options.threads);
  require(!output.empty(), "quantize: the output path is empty");
  // A Hugging Face folder: converted beside the output first (lossless: the source's
  // float type), quantized from there, the intermediate removed either way.
  TempFile converted(output, "quantize");
  const ConvertReport c = convert_hf_checkpoint(input, converted.path().string(), {});
  QuantizeReport report = quantize_gguf(converted.path().string(), output, options);
  report.converted_from = input;
  report.warnings.insert(report.warnings.begin(), c.warnings.begin(), c.warnings.end());
  return report;
}

}  // namespace ember
