// Measured sensitivity by KL divergence (sensitivity.hpp).
#include "quantize/sensitivity.hpp"

#include <algorithm>
#include <cmath>

#include "common/fail.hpp"
#include "kv/kv_cache.hpp"
#include "model/forward.hpp"
#include "model/loaded_model.hpp"
#include "quant/quant.hpp"
#include "quantize/weight_quantizers.hpp"
#include "runtime/backend_factory.hpp"
#include "tokenizer/tokenizer.hpp"

namespace ember::quantize {
namespace {

// log softmax of `row` into `out`, in double for the sum.
void log_softmax(std::span<const float> row, float* out) {
  float max_logit = row[0];
  for (float v : row) max_logit = std::max(max_logit, v);
  double sum = 0;
  for (float v : row) sum += std::exp(double(v) - max_logit);
  const double log_sum = std::log(sum) + max_logit;
  for (size_t i = 0; i < row.size(); ++i) out[i] = float(double(row[i]) - log_sum);
}

}  // namespace

KlResult measure_kl(const std::shared_ptr<const gguf::File>& file, std::span<const int32_t> tokens,
                    std::span<const KlTarget> targets, const KlSettings& settings) {
  require(settings.windows >= 1, "quantize: KL windows is {}, must be at least 1", settings.windows);
  require(settings.window_tokens >= 16, "quantize: KL window_tokens is {}, must be at least 16", settings.window_tokens);
  require(settings.positions >= 1, "quantize: KL positions is {}, must be at least 1", settings.positions);
  require(settings.threads >= 1, "quantize: threads is {}, must be at least 1", settings.threads);

  const tok::Tokenizer tokenizer = tok::Tokenizer::from_gguf(*file);
  const bool bos = tokenizer.bos() >= 0 && tokenizer.adds_bos();
  const int64_t text_per_window = settings.window_tokens - (bos ? 1 : 0);
  const int64_t windows = std::min(settings.windows, int64_t(tokens.size()) / text_per_window);
  if (windows < 1)
    fail(ErrorCode::invalid_argument,
         "quantize: the calibration text has {} tokens, fewer than one sensitivity window of {} tokens", tokens.size(),
         settings.window_tokens);

  const std::unique_ptr<backend::Backend> be = runtime::make_backend(Device::cpu, settings.threads);
  const std::shared_ptr<model::LoadedModel> model = model::LoadedModel::from_file(file, *be);
  const model::HParams& hp = model->hparams;
  kv::CacheConfig cfg;
  cfg.n_layer = hp.n_layer;
  for (const model::LayerParams& lp : hp.layers) cfg.layer_window.push_back(lp.window);
  cfg.k_width = cfg.v_width = int64_t(hp.n_head_kv) * hp.head_dim_k;
  cfg.storage = quant::DType::f16;
  cfg.max_tokens = cfg.max_seq_tokens = int32_t(settings.window_tokens);
  kv::KVCache cache(*be, cfg);
  model::Forward forward(hp, model->weights, *be, int(settings.window_tokens));

  // The batches: scored positions evenly spaced over each window's last 7/8, the last
  // position always among them.
  const int64_t first = settings.window_tokens / 8, span = settings.window_tokens - first;
  const int64_t stride = (span + settings.positions - 1) / settings.positions;
  std::vector<std::vector<model::BatchToken>> batches(static_cast<size_t>(windows));
  int64_t scored = 0;
  for (int64_t w = 0; w < windows; ++w) {
    const int32_t* text = tokens.data() + w * text_per_window;
    auto& batch = batches[size_t(w)];
    batch.resize(size_t(settings.window_tokens));
    for (int64_t i = 0; i < settings.window_tokens; ++i) {
      const int32_t id = bos ? (i == 0 ? tokenizer.bos() : text[i - 1]) : text[i];
      const bool wanted = i >= first && (settings.window_tokens - 1 - i) % stride == 0;
      batch[size_t(i)] = {.token = id, .pos = int32_t(i), .seq = 0, .logits = wanted};
      scored += wanted;
    }
  }

  // The source's log-probabilities, [scored][n_vocab].
  int64_t n_vocab = 0;
  std::vector<float> reference;
  const auto run_all = [&](const std::function<void(int64_t row, std::span<const float> logits)>& sink) {
    int64_t row = 0;
    for (const auto& batch : batches) {
      forward.run(cache, batch, [&](size_t, std::span<const float> logits) { sink(row++, logits); });
      cache.truncate(0, 0);
    }
  };
  run_all([&](int64_t row, std::span<const float> logits) {
    if (reference.empty()) {
      n_vocab = int64_t(logits.size());
      reference.resize(size_t(scored * n_vocab));
    }
    log_softmax(logits, reference.data() + row * n_vocab);
  });

  KlResult result;
  result.windows = windows;
  result.tokens = windows * settings.window_tokens;
  result.positions = scored;
  const backend::Buffer* data = model->weights.token_embd.buffer;   // the file's tensor data, wrapped
  std::vector<backend::Tensor*> slots = model->weights.slots();
  std::vector<float> values, log_q(static_cast<size_t>(n_vocab));
  int64_t done = 0;
  for (const KlTarget& target : targets) {
    require(target.tensor < file->tensors().size(), "quantize: tensor index {} out of range", target.tensor);
    const gguf::TensorInfo& t = file->tensors()[target.tensor];
    // The slots viewing this tensor's bytes (whole, or row slices of it).
    struct Swap {
      backend::Tensor* slot;
      backend::Tensor saved;
    };
    std::vector<Swap> swaps;
    for (backend::Tensor* s : slots)
      if (!s->empty() && s->buffer == data && s->offset >= t.offset && s->offset < t.offset + t.n_bytes)
        swaps.push_back({s, *s});
    if (!swaps.empty()) {
      if (t.shape.empty() || t.cols() % quant::type_info(target.type).block_elems != 0)
        fail(ErrorCode::invalid_argument, "quantize: tensor '{}' has rows of {} values, which {} cannot hold", t.name,
             t.shape.empty() ? 0 : t.cols(), quant::type_name(target.type));
      const int64_t rows = int64_t(t.n_elements) / t.cols(), cols = t.cols();
      const size_t in_row = quant::row_bytes(t.type, cols), out_row = quant::row_bytes(target.type, cols);
      auto bytes = std::make_shared<std::vector<std::byte>>(out_row * size_t(rows));
      values.resize(size_t(cols));
      for (int64_t r = 0; r < rows; ++r) {
        quant::dequantize_row(t.type, t.data + size_t(r) * in_row, values.data(), cols);
        quantize_values(target.type, values.data(), bytes->data() + size_t(r) * out_row, cols);
      }
      const std::shared_ptr<backend::Buffer> buffer = be->wrap_host(*bytes, bytes);
      for (const Swap& s : swaps) {
        const int64_t first_row = int64_t((s.saved.offset - t.offset) / in_row);
        *s.slot = backend::make_tensor(*buffer, size_t(first_row) * out_row, target.type, s.saved.rows, s.saved.cols);
      }
      double kl = 0;
      try {
        run_all([&](int64_t row, std::span<const float> logits) {
          log_softmax(logits, log_q.data());
          const float* log_p = reference.data() + row * n_vocab;
          double sum = 0;
          for (int64_t v = 0; v < n_vocab; ++v) sum += std::exp(double(log_p[v])) * (double(log_p[v]) - log_q[size_t(v)]);
          kl += sum;
        });
      } catch (...) {
        for (const Swap& s : swaps) *s.slot = s.saved;
        throw;
      }
      for (const Swap& s : swaps) *s.slot = s.saved;
      result.kl[target.tensor] = std::max(0.0, kl / double(scored));
    }
    if (settings.on_tensor) settings.on_tensor(++done, int64_t(targets.size()));
  }
  return result;
}

}  // namespace ember::quantize
