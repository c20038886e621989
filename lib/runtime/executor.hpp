// The executor: one per Model, shared by every Session and Engine of that model.
//
// It owns what running the model needs once: the backend (one thread pool of
// ModelOptions::threads threads), the forward pass and its workspace, and one
// paged KV cache per storage type holding the sequences of all sessions. It runs
// one *step* at a time: a batch of (token, position, sequence) entries from any
// number of sequences in one forward pass. Each sequence's part of a step is
// placed, checked and committed or rolled back on its own: a part that does not
// fit the cache fails alone, the other parts of the step go ahead.
//
// Thread safety: step() and every cache access take the executor's lock, so
// sessions on different threads take turns per step (a long prefill yields
// between its chunks). Logits callbacks run during the pass, under the lock (a
// recursive one: a callback may read a session's state, e.g. kv_memory(), but must
// not start another evaluation).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "kv/kv_cache.hpp"
#include "model/forward.hpp"

namespace ember::model {
struct LoadedModel;
}

namespace ember::runtime {

// How one sequence's part of a step ended.
enum class StepStatus {
  ok,          // evaluated and committed
  cancelled,   // the step was cancelled before it finished; nothing of it stays
  cache_full,  // the part did not fit the sequence's budget or the pool; nothing of it stays
};

// One sequence's tokens in a step.
struct StepPart {
  int32_t seq = 0;                     // sequence id in the cache
  std::span<const int32_t> tokens;     // appended at positions first_pos, first_pos + 1, ...
  int32_t first_pos = 0;
  // Which rows want logits: every row (all_logits) or only the last one (want_last).
  bool all_logits = false;
  bool want_last = true;
  // Place the tokens one at a time, each as a plain one-token step would (a speculative
  // verification of a sequence with KV eviction: KVCache::place_stepwise).
  bool stepwise = false;
  // Receives (index into tokens, logits row [n_vocab]); the row is valid during the call only.
  std::function<void(size_t index, std::span<const float> row)> on_logits;

  // Out: the outcome and, for cache_full, the cache's message.
  StepStatus status = StepStatus::ok;
  std::string message;
};

class Executor {
 public:
  // `pool_for(types)` gives the model's KV page pool of a pair of key and value row types.
  using PoolSource = std::function<std::shared_ptr<kv::Pool>(kv::KVTypes types)>;
  // `backend` runs every op; on a device it is the backend that holds the weights and
  // the KV pools (one stream for all), on the CPU one of its own with the model's threads.
  Executor(const model::LoadedModel& model, std::shared_ptr<backend::Backend> backend, PoolSource pool_for);
  ~Executor();

  backend::Backend& backend() { return *backend_; }
  const model::LoadedModel& model() const { return model_; }

  // The lock every user of the caches holds (step() takes it itself).
  std::recursive_mutex& mutex() { return mutex_; }
  // The cache of a storage type and exact window (KVCacheOptions::exact_recent, 0 for
  // none), made on first use. Call with the lock held.
  kv::KVCache& cache(kv::KVTypes types, int32_t exact_recent = 0);
  // A sequence id no other user has.
  int32_t new_sequence_id() { return next_seq_.fetch_add(1); }

  // Runs every part in one forward pass on `cache` (taking the lock). Parts that
  // do not fit get cache_full and are left out of the pass. When `cancel` becomes
  // true during the pass, every part gets cancelled. Throws invalid_argument for a
  // bad token (nothing runs then) and rethrows a failure of the pass itself after
  // rolling back every part. Returns the number of tokens evaluated.
  // `order`: llama.cpp's sums (sessions) or batch-invariant ones (the engine).
  size_t step(kv::KVCache& cache, std::span<StepPart> parts, const std::atomic<bool>* cancel = nullptr,
              backend::SumOrder order = backend::SumOrder::llama_cpp);
  // Rewrites the sink rows of `seq` that a cut into a stepwise step moved
  // (KVCache::truncate). The caller holds mutex().
  void apply_sink_moves(kv::KVCache& cache, int32_t seq);


 private:
  const model::LoadedModel& model_;
  std::shared_ptr<backend::Backend> backend_;
  PoolSource pool_for_;
  std::recursive_mutex mutex_;
  std::unique_ptr<model::Forward> forward_;
  std::map<std::pair<kv::KVTypes, int32_t>, std::unique_ptr<kv::KVCache>> caches_;
  std::atomic<int32_t> next_seq_{0};
};

}  // namespace ember::runtime
