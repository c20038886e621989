#include "runtime/executor.hpp"

#include "common/fail.hpp"
#include "model/loaded_model.hpp"

namespace ember::runtime {

Executor::Executor(const model::LoadedModel& model, std::shared_ptr<backend::Backend> backend, PoolSource pool_for)
    : model_(model), backend_(std::move(backend)), pool_for_(std::move(pool_for)) {
  // Steps are cut by their callers (prefill chunks, the engine's token budget), so
  // the pass itself never splits a batch.
  forward_ = std::make_unique<model::Forward>(model_.hparams, model_.weights, *backend_, 1 << 30);
}

Executor::~Executor() = default;

kv::KVCache& Executor::cache(kv::KVTypes types, int32_t exact_recent) {
  auto& cache = caches_[{types, exact_recent}];
  if (!cache) {
    const model::HParams& hp = model_.hparams;
    kv::CacheConfig cfg;
    cfg.n_layer = hp.n_layer;
    for (const model::LayerParams& lp : hp.layers) cfg.layer_window.push_back(lp.window);
    cfg.exact_recent = exact_recent;
    // The exact window's rows share the model's F16 pool with F16 sessions.
    cache = std::make_unique<kv::KVCache>(pool_for_(types), *backend_, cfg,
                                          exact_recent > 0 ? pool_for_({quant::DType::f16, quant::DType::f16}) : nullptr);
  }
  return *cache;
}

size_t Executor::step(kv::KVCache& cache, std::span<StepPart> parts, const std::atomic<bool>* cancel,
                      backend::SumOrder order) {
  std::lock_guard lock(mutex_);
  // Every part's entries, checked before anything runs (a bad token fails the call).
  std::vector<model::BatchToken> all;
  std::vector<std::pair<size_t, size_t>> all_owner;  // entry -> (part, index in part)
  for (size_t p = 0; p < parts.size(); ++p) {
    StepPart& part = parts[p];
    part.status = StepStatus::ok;
    part.message.clear();
    for (size_t i = 0; i < part.tokens.size(); ++i) {
      const bool logits = part.all_logits || (part.want_last && i + 1 == part.tokens.size());
      all.push_back({part.tokens[i], part.first_pos + int32_t(i), part.seq, logits});
      all_owner.emplace_back(p, i);
    }
  }
  forward_->validate(all);

  // Place each part on its own: one that does not fit fails alone and leaves the batch.
  kv::Placement merged;
  merged.slots.assign(size_t(model_.hparams.n_layer), {});
  auto roll_back = [&] { cache.undo(merged); };
  try {
    for (StepPart& part : parts) {
      if (part.tokens.empty()) continue;
      std::vector<kv::CellRequest> requests(part.tokens.size());
      for (size_t i = 0; i < part.tokens.size(); ++i) requests[i] = {part.seq, part.first_pos + int32_t(i)};
      kv::Placement placement;
      try {
        // A stepwise part needs the cache to end just before it (else: a plain placement).
        const bool stepwise = part.stepwise && part.first_pos > 0 && cache.next_index(part.seq) == part.first_pos;
        placement = stepwise ? cache.place_stepwise(part.seq, part.first_pos, int32_t(part.tokens.size()))
                             : cache.place(requests);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::cache_full) throw;
        part.status = StepStatus::cache_full;
        part.message = e.what();
        continue;
      }
      merged.append(placement);
    }
  } catch (...) {
    roll_back();
    throw;
  }
  // The entries of the placed parts, in part order (the order of merged's slots).
  std::vector<model::BatchToken> batch;
  std::vector<std::pair<size_t, size_t>> owner;  // batch index -> (part, index in part)
  for (size_t k = 0; k < all.size(); ++k) {
    if (parts[all_owner[k].first].status != StepStatus::ok) continue;
    batch.push_back(all[k]);
    owner.push_back(all_owner[k]);
  }
  if (batch.empty()) return 0;

  const model::Forward::LogitsSink sink = [&](size_t index, std::span<const float> row) {
    const auto [p, i] = owner[index];
    if (parts[p].on_logits) parts[p].on_logits(i, row);
  };
  bool finished = false;
  backend_->set_sum_order(order);
  try {
    finished = forward_->compute(cache, batch, merged, 0, sink, cancel);
  } catch (...) {
    roll_back();
    throw;
  }
  if (!finished) {
    roll_back();
    for (StepPart& part : parts)
      if (part.status == StepStatus::ok && !part.tokens.empty()) part.status = StepStatus::cancelled;
    return 0;
  }
  cache.commit(merged);
  for (const auto& [seq, first] : merged.first_idx) cache.trim_windows(seq);
  return batch.size();
}

void Executor::apply_sink_moves(kv::KVCache& cache, int32_t seq) {
  const std::vector<kv::SinkMove> moves = cache.take_sink_moves(seq);
  if (!moves.empty()) forward_->apply_sink_moves(cache, moves);
}

}  // namespace ember::runtime
