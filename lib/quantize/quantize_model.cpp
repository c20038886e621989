// ember::quantize_model (include/ember/quantize.hpp): plan the tensor types, quantize
// each tensor's rows on the requested threads, write the file under a temporary name in
// the output's folder and rename it into place.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <system_error>
#include <thread>

#include "common/fail.hpp"
#include "ember/model.hpp"
#include "ember/perplexity.hpp"
#include "ember/quantize.hpp"
#include "gguf/gguf.hpp"
#include "model/arch.hpp"
#include "quant/quant.hpp"
#include "quantize/awq.hpp"
#include "quantize/calibration.hpp"
#include "quantize/gptq.hpp"
#include "quantize/mixed.hpp"
#include "quantize/type_rules.hpp"
#include "quantize/weight_quantizers.hpp"

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
  }
  fail(ErrorCode::invalid_argument, "quantize: unknown recipe {}", int(r));
}

// The output's temporary sibling: created (empty) at once so that an unwritable folder
// fails before any work, removed by the destructor unless committed.
class TempFile {
 public:
  explicit TempFile(const fs::path& output) : output_(output) {
    const fs::path folder = output.has_parent_path() ? output.parent_path() : fs::path(".");
    for (int attempt = 0;; ++attempt) {
      path_ = folder / fmt::format(".{}.tmp-{}-{}", output.filename().string(), ::getpid(), attempt);
      const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd >= 0) {
        ::close(fd);
        return;
      }
      if (errno != EEXIST || attempt >= 100)
        fail(ErrorCode::io, "quantize: cannot create a file in '{}' for '{}': {}", folder.string(), output.string(),
             std::strerror(errno));
    }
  }
  ~TempFile() {
    if (!committed_) {
      std::error_code ignored;
      fs::remove(path_, ignored);
    }
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const fs::path& path() const { return path_; }
  void commit() {
    std::error_code ec;
    fs::rename(path_, output_, ec);
    if (ec) fail(ErrorCode::io, "quantize: cannot rename '{}' to '{}': {}", path_.string(), output_.string(), ec.message());
    committed_ = true;
  }

 private:
  fs::path output_, path_;
  bool committed_ = false;
};

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
      quantize::quantize_values(type, scaled.data(), dst, cols);
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
  for (const RowSums& s : sums) total.error2 += s.error2, total.norm2 += s.norm2;
  return total;
}

// All rows of `t` by GPTQ onto `type` (Q4_0 or Q4_K) with the calibration Hessian `h`.
RowSums gptq_tensor(const gguf::TensorInfo& t, DType type, const quantize::Hessian& h,
                    const quantize::GptqOptions& gptq_options, std::byte* out) {
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
  quantize::gptq_quantize(type, values.data(), rows, cols, h.h.data(), out, gptq_options);
  RowSums sums;
  for (int64_t r = 0; r < rows; ++r) {
    quant::dequantize_row(type, out + size_t(r) * out_row, back.data(), cols);
    for (int64_t i = 0; i < cols; ++i) {
      const double w = values[size_t(r * cols + i)], e = w - double(back[size_t(i)]);
      sums.error2 += e * e;
      sums.norm2 += w * w;
    }
  }
  return sums;
}

}  // namespace

std::optional<QuantRecipe> parse_quant_recipe(std::string_view name) {
  static constexpr QuantRecipe kAll[] = {QuantRecipe::q8_0, QuantRecipe::q4_0, QuantRecipe::q4_1, QuantRecipe::q5_0,
                                         QuantRecipe::q5_1, QuantRecipe::q4_k, QuantRecipe::q5_k, QuantRecipe::q6_k,
                                         QuantRecipe::q4_k_m, QuantRecipe::q5_k_m};
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

QuantizeReport quantize_model(const std::string& input, const std::string& output, const QuantizeOptions& options) {
  require(options.threads >= 1, "quantize: threads is {}, must be at least 1", options.threads);
  require(!output.empty(), "quantize: the output path is empty");
  const quantize::RecipeInfo& recipe = quantize::recipe_info(to_internal(options.recipe));
  const bool gptq = options.method == QuantMethod::gptq, awq = options.method == QuantMethod::awq;
  if (gptq || awq) {
    const char* method = gptq ? "gptq" : "awq";
    if (gptq && !quantize::gptq_can_write(recipe.base))
      fail(ErrorCode::unsupported, "quantize: --method gptq writes Q4_0 and Q4_K (recipes Q4_0, Q4_K, Q4_K_M), not {}",
           recipe.name);
    require(!options.calibration_text.empty(), "quantize: --method {} needs a calibration text (--calib FILE)", method);
    require(options.samples >= 1, "quantize: samples is {}, must be at least 1", options.samples);
    require(options.sample_tokens >= 2, "quantize: sample_tokens is {}, must be at least 2", options.sample_tokens);
    require(options.damp > 0 && std::isfinite(options.damp), "quantize: damp is {}, must be > 0", options.damp);
  } else {
    require(options.method == QuantMethod::rtn, "quantize: unknown method {}", int(options.method));
  }
  require(!options.act_order || gptq, "quantize: act_order (--act-order) is used by --method gptq only");
  require(options.target_bpw >= 0 && std::isfinite(options.target_bpw), "quantize: target_bpw is {}, must be >= 0",
          options.target_bpw);
  require(options.budget_bytes == 0 || options.target_bpw == 0, "quantize: give a byte budget or a bits-per-weight target, not both");
  const bool mix = options.budget_bytes > 0 || options.target_bpw > 0;
  require(!mix || !options.pure, "quantize: --pure and a mixed-precision budget exclude each other");
  require(options.max_ppl_rise >= 0 && std::isfinite(options.max_ppl_rise), "quantize: max_ppl_rise is {}, must be >= 0",
          options.max_ppl_rise);
  require(options.max_ppl_rise == 0 || !options.eval_text.empty(),
          "quantize: --max-ppl-rise needs an evaluation text (--eval FILE)");
  require(options.eval_ctx >= 8, "quantize: eval_ctx is {}, must be at least 8", options.eval_ctx);
  std::string eval_text;
  if (!options.eval_text.empty()) {
    std::ifstream in(options.eval_text, std::ios::binary);
    std::ostringstream text;
    if (in) text << in.rdbuf();
    if (!in || in.bad()) fail(ErrorCode::io, "quantize: cannot read the evaluation text '{}'", options.eval_text);
    eval_text = text.str();
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
    const bool readable = t.type == DType::f32 || t.type == DType::f16 || t.type == DType::bf16 ||
                          quant::type_info(t.type).weight_supported;
    if (!readable)
      fail(ErrorCode::unsupported, "quantize: tensor '{}' is {}, which ember cannot read to requantize", t.name,
           quant::type_name(t.type));
    if (!quantize::can_write(plan.type))
      fail(ErrorCode::unsupported, "quantize: tensor '{}' would be {}, which ember cannot write", t.name,
           quant::type_name(plan.type));
    if (t.type != DType::f32 && t.type != DType::f16 && t.type != DType::bf16) ++requantized;
  }
  if (requantized > 0)
    report.warnings.push_back(fmt::format(
        "{} of the tensors to quantize are already quantized: they are dequantized and quantized again, which loses "
        "more accuracy than quantizing the original weights",
        requantized));

  TempFile temp(output);   // fails here, before any work, when the folder cannot be written

  quantize::Calibration calibration;
  quantize::AwqPlan awq_plan;
  if (gptq || awq || (mix && !options.calibration_text.empty())) {
    calibration = quantize::calibrate(
        file_ptr, {.text_path = options.calibration_text,
                   .samples = options.samples,
                   .sample_tokens = options.sample_tokens,
                   .threads = options.threads,
                   .on_sample = [&](int64_t done, int64_t total) {
                     if (options.on_calibration) options.on_calibration({.sample = done, .samples = total});
                   }});
    report.calibration_samples = calibration.samples;
    report.calibration_tokens = calibration.tokens;
    for (std::string& w : calibration.warnings) report.warnings.push_back(std::move(w));
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
        {.budget_bytes = budget, .threads = options.threads}, [&](int64_t done, int64_t total) {
          if (options.on_search) options.on_search({.group = done, .groups = total, .phase = "mix"});
        });
    for (const quantize::MixChoice& c : chosen) sensitivity[c.plan] = c.sensitivity;
  }
  if (awq) {
    awq_plan = quantize::awq_plan(file, plans, calibration, {.threads = options.threads},
                                  [&](int64_t done, int64_t total) {
                                    if (options.on_search) options.on_search({.group = done, .groups = total, .phase = "awq"});
                                  });
    report.awq_skipped = std::move(awq_plan.skipped);
  }

  gguf::Writer writer(file.alignment());
  for (const gguf::KeyValue& kv : file.metadata())
    if (copied_key(kv.key)) writer.add(kv.key, kv.value);
  writer.add_uint32("general.quantization_version", kQuantizationVersion);
  writer.add_uint32("general.file_type", recipe.file_type);

  double error2 = 0, norm2 = 0;
  std::vector<std::byte> buffer;
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
    if (const auto folded = awq_plan.folded.find(t.name); folded != awq_plan.folded.end()) {
      // A norm's weight divided by the AWQ scales of the projections it feeds.
      const std::span<const std::byte> bytes = std::as_bytes(std::span(folded->second));
      writer.add_tensor(t.name, DType::f32, t.shape, bytes);
      q.type_out = quant::type_name(DType::f32);
      q.bytes_out = bytes.size();
      q.awq = true;
      q.awq_alpha = awq_plan.folded_alpha.at(t.name);
    } else if (!plan.quantize) {
      writer.add_tensor(t.name, t.type, t.shape, std::span(t.data, t.n_bytes));
      q.bytes_out = t.n_bytes;
    } else {
      buffer.assign(quant::row_bytes(plan.type, t.cols()) * size_t(t.rows()), std::byte{0});
      const auto hessian = calibration.hessians.find(t.name);
      // GPTQ where the planned type is one it writes (Q4_0, Q4_K; a mixture's Q6_K,
      // Q5_0 fallbacks etc. stay round-to-nearest) and the calibration saw the input.
      q.gptq = gptq && quantize::gptq_can_write(plan.type) && hessian != calibration.hessians.end() &&
               hessian->second->cols == t.cols();
      const auto transform = awq_plan.transforms.find(t.name);
      const quantize::AwqTransform* awq_transform = transform != awq_plan.transforms.end() ? &transform->second : nullptr;
      q.awq = awq_transform != nullptr;
      q.awq_alpha = awq_transform ? awq_transform->alpha : 0.0;
      const RowSums sums = q.gptq ? gptq_tensor(t, plan.type, *hessian->second,
                                                {.damp = options.damp, .act_order = options.act_order}, buffer.data())
                                  : quantize_tensor(t, plan.type, buffer.data(), options.threads, awq_transform);
      writer.add_tensor(t.name, plan.type, t.shape, buffer);
      q.bytes_out = buffer.size();
      q.relative_error = sums.norm2 > 0 ? std::sqrt(sums.error2 / sums.norm2) : 0.0;
      error2 += sums.error2;
      norm2 += sums.norm2;
    }
    report.bytes_in += q.bytes_in;
    report.bytes_out += q.bytes_out;
    report.tensors.push_back(std::move(q));
    if (options.on_tensor) options.on_tensor({.index = k, .count = plans.size(), .tensor = &report.tensors.back()});
  }
  report.relative_error = norm2 > 0 ? std::sqrt(error2 / norm2) : 0.0;

  try {
    writer.write(temp.path());
  } catch (const Error& e) {
    fail(e.code(), "quantize: cannot write '{}': {}", output, e.what());
  }
  std::error_code ec;
  report.file_bytes = fs::file_size(temp.path(), ec);
  if (!eval_text.empty()) {
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
      return perplexity(*model, std::string_view(eval_text), eval_options);
    };
    const PerplexityResult before = eval(input, 0), after = eval(temp.path(), 1);
    report.ppl_before = before.perplexity;
    report.ppl_before_error = before.error;
    report.ppl_after = after.perplexity;
    report.ppl_after_error = after.error;
    report.eval_scored = after.scored;
    if (options.max_ppl_rise > 0 && after.perplexity > before.perplexity * (1.0 + options.max_ppl_rise)) {
      report.rejected = true;   // the temporary is removed by its destructor
      return report;
    }
  }
  temp.commit();
  return report;
}

}  // namespace ember
