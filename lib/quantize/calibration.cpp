// Calibration Hessians from a text (calibration.hpp).
#include "quantize/calibration.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "common/fail.hpp"
#include "kv/kv_cache.hpp"
#include "model/forward.hpp"
#include "model/loaded_model.hpp"
#include "runtime/backend_factory.hpp"
#include "tokenizer/tokenizer.hpp"

namespace ember::quantize {
namespace {

using RowMajorF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::io, "quantize: cannot read the calibration text '{}'", path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(ErrorCode::io, "quantize: cannot read the calibration text '{}'", path);
  return text.str();
}

// One Hessian being summed: the float product of one sample's rows (in a scratch
// matrix shared by all groups of that width) is added to it in double.
struct Accumulator {
  std::shared_ptr<Hessian> hessian;
};

}  // namespace

void run_parallel(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> workers;
  for (int t = 1; t < n; ++t)
    workers.emplace_back([&, t] {
      try {
        fn(t);
      } catch (...) {
        errors[size_t(t)] = std::current_exception();
      }
    });
  try {
    fn(0);
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (std::thread& w : workers) w.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

Calibration calibrate(const std::shared_ptr<const gguf::File>& file, const CalibrationSettings& settings) {
  require(settings.samples >= 1, "quantize: --samples is {}, must be at least 1", settings.samples);
  require(settings.sample_tokens >= 2, "quantize: sample_tokens is {}, must be at least 2", settings.sample_tokens);
  require(settings.threads >= 1, "quantize: threads is {}, must be at least 1", settings.threads);
  require(!settings.text_path.empty(), "quantize: a calibrated method needs a calibration text (--calib FILE)");
  const std::string text = read_text(settings.text_path);

  const tok::Tokenizer tokenizer = tok::Tokenizer::from_gguf(*file);
  std::vector<int32_t> tokens = tokenizer.encode(text, false, false);
  if (settings.max_tokens >= 0 && int64_t(tokens.size()) > settings.max_tokens) tokens.resize(size_t(settings.max_tokens));
  const bool bos = tokenizer.bos() >= 0 && tokenizer.adds_bos();
  const int64_t text_per_sample = settings.sample_tokens - (bos ? 1 : 0);
  const auto available = int64_t(tokens.size()) / text_per_sample;
  if (available < 1)
    fail(ErrorCode::invalid_argument,
         "quantize: the calibration text '{}' has {} tokens, fewer than one sample of {} tokens", settings.text_path,
         tokens.size(), settings.sample_tokens);
  Calibration result;
  const int64_t samples = std::min(available, settings.samples);
  if (samples < settings.samples)
    result.warnings.push_back(fmt::format(
        "the calibration text '{}' has {} tokens: {} samples of {} tokens, fewer than the {} asked for", settings.text_path,
        tokens.size(), samples, settings.sample_tokens, settings.samples));

  const std::unique_ptr<backend::Backend> be = runtime::make_backend(Device::cpu, settings.threads);
  const std::shared_ptr<model::LoadedModel> model = model::LoadedModel::from_file(file, *be);
  const model::HParams& hp = model->hparams;
  kv::CacheConfig cfg;
  cfg.n_layer = hp.n_layer;
  for (const model::LayerParams& lp : hp.layers) cfg.layer_window.push_back(lp.window);
  cfg.k_width = cfg.v_width = int64_t(hp.n_head_kv) * hp.head_dim_k;
  cfg.storage = quant::DType::f16;
  cfg.max_tokens = cfg.max_seq_tokens = int32_t(settings.sample_tokens);
  kv::KVCache cache(*be, cfg);
  model::Forward forward(hp, model->weights, *be, int(settings.sample_tokens));

  // One accumulator per (layer, first weight name): the group reading one input.
  std::map<std::string, Accumulator> groups;
  std::map<int64_t, RowMajorF> scratch;   // by width: [cols][cols] float, lower triangle used
  std::vector<float> rows;                // [n][cols], the input downloaded
  forward.set_matmul_observer([&](int layer, std::span<const std::string_view> names, const backend::Tensor& input) {
    Accumulator& acc = groups[fmt::format("blk.{}.{}", layer, names[0])];
    const int64_t n = input.rows, cols = input.cols;
    if (!acc.hessian) {
      acc.hessian = std::make_shared<Hessian>();
      acc.hessian->cols = cols;
      acc.hessian->h.assign(size_t(cols * cols), 0.0);
      acc.hessian->abs_max.assign(size_t(cols), 0.0f);
      for (std::string_view name : names) result.hessians[fmt::format("blk.{}.{}.weight", layer, name)] = acc.hessian;
    }
    rows.resize(size_t(n * cols));
    be->download(input, rows.data());
    const Eigen::Map<const RowMajorF> x(rows.data(), n, cols);
    float* amax = acc.hessian->abs_max.data();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < cols; ++j) amax[j] = std::max(amax[j], std::fabs(rows[size_t(i * cols + j)]));
    if (settings.keep_rows > 0 && n > 1) {
      // Evenly spaced rows after the first (BOS), this sample's share of keep_rows.
      const int64_t quota = std::min({std::max<int64_t>(1, settings.keep_rows / samples), n - 1,
                                      settings.keep_rows - acc.hessian->n_kept});
      for (int64_t k = 0; k < quota; ++k) {
        const int64_t i = 1 + k * (n - 1) / quota;
        acc.hessian->kept.insert(acc.hessian->kept.end(), rows.begin() + i * cols, rows.begin() + (i + 1) * cols);
        ++acc.hessian->n_kept;
      }
    }
    RowMajorF& sample = scratch[cols];
    if (sample.rows() != cols) sample.resize(cols, cols);
    // Rows [a, b) of the lower triangle (columns [0, b)) at a time, in fixed bands of 64
    // rows taken by the threads widest first: each band is the same product whatever
    // the thread count, so the Hessian's bits do not depend on it.
    const auto band = [&](int64_t a, int64_t b) {
      sample.block(a, 0, b - a, b).noalias() = x.middleCols(a, b - a).transpose() * x.leftCols(b);
      double* h = acc.hessian->h.data();
      for (int64_t i = a; i < b; ++i)
        for (int64_t j = 0; j <= i; ++j) h[i * cols + j] += double(sample(i, j));
    };
    constexpr int64_t kBand = 64;
    const int64_t n_bands = (cols + kBand - 1) / kBand;
    std::atomic<int64_t> next{0};
    run_parallel(int(std::min<int64_t>(settings.threads, n_bands)), [&](int) {
      for (int64_t k; (k = next.fetch_add(1)) < n_bands;) {
        const int64_t band_index = n_bands - 1 - k;
        band(band_index * kBand, std::min(cols, (band_index + 1) * kBand));
      }
    });
    acc.hessian->rows_seen += n;
  });

  std::vector<model::BatchToken> batch(size_t(settings.sample_tokens));
  for (int64_t s = 0; s < samples; ++s) {
    const int32_t* window = tokens.data() + s * text_per_sample;
    for (int64_t i = 0; i < settings.sample_tokens; ++i) {
      const int32_t id = bos ? (i == 0 ? tokenizer.bos() : window[i - 1]) : window[i];
      batch[size_t(i)] = {.token = id, .pos = int32_t(i), .seq = 0, .logits = false};
    }
    forward.run(cache, batch, [](size_t, std::span<const float>) {});
    cache.truncate(0, 0);
    result.tokens += settings.sample_tokens;
    ++result.samples;
    if (settings.on_sample) settings.on_sample(s + 1, samples);
  }
  // The upper triangle from the lower one.
  for (auto& [name, acc] : groups) {
    const int64_t cols = acc.hessian->cols;
    double* h = acc.hessian->h.data();
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t j = i + 1; j < cols; ++j) h[i * cols + j] = h[j * cols + i];
  }
  return result;
}

}  // namespace ember::quantize
