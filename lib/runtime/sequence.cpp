#include "runtime/sequence.hpp"

#include <algorithm>

#include "common/fail.hpp"
#include "model/loaded_model.hpp"
#include "runtime/model_impl.hpp"

namespace ember::runtime {
namespace {

const Model::Impl& checked(const std::shared_ptr<const Model>& model) {
  if (!model->impl().loaded)
    fail(ErrorCode::invalid_argument, "the model was loaded with vocab_only; it has no weights to run sessions on");
  return model->impl();
}

// Budget, eviction and prefill chunk of a sequence from its options.
struct Limits {
  kv::SeqPolicy policy;
  int32_t capacity = 0;
  int32_t chunk = 0;
};

Limits limits_for(const model::HParams& hp, const KVCacheOptions& kv, int32_t chunk) {
  require(kv.max_tokens >= 1 && kv.max_tokens <= (1 << 24), "KVCacheOptions::max_tokens must be in [1, 2^24], got {}",
          kv.max_tokens);
  require(chunk >= 1 && chunk <= 65536, "SessionOptions::prefill_chunk_size must be in [1, 65536], got {}", chunk);
  const quant::DType storage = kv_types(kv.storage, kv.group_size).k;  // both types' groups are group_size
  if (storage != quant::DType::f16 && storage != quant::DType::f32 &&
      hp.head_dim_k % int(quant::type_info(storage).block_elems) != 0)
    fail(ErrorCode::invalid_argument, "KVCacheOptions: a head of {} values is not a whole number of groups of {}",
         hp.head_dim_k, kv.group_size);
  Limits l;
  l.chunk = chunk;
  switch (kv.eviction) {
    case KVEviction::none:
      l.capacity = int32_t(std::min<int64_t>(kv.max_tokens, hp.n_ctx_train));
      l.policy.max_tokens = l.capacity;
      break;
    case KVEviction::streaming:
      require(kv.sinks >= 0 && kv.window >= 1 && int64_t(kv.sinks) + kv.window <= (1 << 24),
              "KVCacheOptions: StreamingLLM needs sinks >= 0 and window >= 1 (got {} and {})", kv.sinks, kv.window);
      require(kv.window > kv.sinks, "KVCacheOptions: the StreamingLLM window ({}) must be larger than the sinks ({})",
              kv.window, kv.sinks);
      l.policy.eviction = {kv::Eviction::streaming, kv.sinks, 0, 0};
      l.policy.max_tokens = kv.sinks + kv.window;
      l.capacity = INT32_MAX;
      l.chunk = std::min(chunk, std::max(1, kv.window / 2));
      break;
    case KVEviction::h2o:
      require(kv.heavy >= 0 && kv.recent >= 1 && int64_t(kv.heavy) + kv.recent <= (1 << 24),
              "KVCacheOptions: H2O needs heavy >= 0 and recent >= 1 (got {} and {})", kv.heavy, kv.recent);
      l.policy.eviction = {kv::Eviction::h2o, 0, kv.heavy, kv.recent};
      l.policy.max_tokens = kv.heavy + kv.recent;
      l.capacity = INT32_MAX;
      l.chunk = std::min(chunk, kv.recent);
      break;
    default:
      fail(ErrorCode::invalid_argument, "KVCacheOptions::eviction has an unknown value {}", int(kv.eviction));
  }
  return l;
}

}  // namespace

kv::KVCache& cache_for(Executor& ex, const KVCacheOptions& kv) {
  const kv::KVTypes types = kv_types(kv.storage, kv.group_size);
  require(kv.exact_recent >= 0 && kv.exact_recent <= 4096, "KVCacheOptions::exact_recent must be in [0, 4096], got {}",
          kv.exact_recent);
  // The exact window only matters for quantized rows.
  const bool quantized = types.k != quant::DType::f16 && types.k != quant::DType::f32;
  const int32_t exact = quantized ? kv.exact_recent : 0;
  if (exact > 0) {
    require(kv.eviction == KVEviction::none,
            "KVCacheOptions::exact_recent needs eviction none (the window would have to follow evictions)");
    if (ex.backend().name() == "cuda")
      fail(ErrorCode::unsupported, "KVCacheOptions::exact_recent is not implemented on the CUDA backend");
  }
  std::lock_guard lock(ex.mutex());
  return ex.cache(types, exact);
}

Sequence::Sequence(std::shared_ptr<const Model> model, const KVCacheOptions& kv, int32_t prefill_chunk_size)
    : model_(std::move(model)),
      m_(checked(model_)),
      ex_(m_.executor()),
      kv_(kv),
      cache_(cache_for(ex_, kv)) {
  const Limits l = limits_for(m_.loaded->hparams, kv_, prefill_chunk_size);
  capacity_ = l.capacity;
  chunk_ = l.chunk;
  id_ = ex_.new_sequence_id();
  std::lock_guard lock(ex_.mutex());
  cache_.set_policy(id_, l.policy);
}

Sequence::Sequence(const Sequence& other)
    : model_(other.model_),
      m_(other.m_),
      ex_(other.ex_),
      kv_(other.kv_),
      cache_(other.cache_),
      chunk_(other.chunk_),
      capacity_(other.capacity_),
      order_(other.order_),
      tokens_(other.tokens_),
      n_evaluated_(other.n_evaluated_),
      logits_(other.logits_),
      logits_for_(other.logits_for_) {
  id_ = ex_.new_sequence_id();
  std::lock_guard lock(ex_.mutex());
  cache_.set_policy(id_, cache_.policy(other.id_));
  cache_.fork_from(cache_, other.id_, id_);
}

Sequence::~Sequence() {
  std::lock_guard lock(ex_.mutex());
  cache_.remove(id_);
  cache_.erase_policy(id_);
  // A sequence ending is when the host expects memory back (a session closed).
  cache_.trim_pool();
}

void Sequence::append(std::span<const int32_t> tokens) {
  const int64_t n_vocab = m_.loaded->hparams.n_vocab;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= n_vocab)
      fail(ErrorCode::invalid_argument, "token {} (id {}) is outside the vocabulary [0, {})", i, tokens[i], n_vocab);
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
}

void Sequence::drop_pending(size_t n) { tokens_.resize(std::max(n, n_evaluated_)); }

StepPart Sequence::next_part(size_t max_tokens, const std::function<void(size_t, std::span<const float>)>* sink,
                             size_t sink_base) {
  StepPart part;
  part.seq = id_;
  const size_t n = std::min(max_tokens, n_pending());
  part.tokens = std::span<const int32_t>(tokens_).subspan(n_evaluated_, n);
  part.first_pos = int32_t(n_evaluated_);
  const bool reaches_end = n_evaluated_ + n == tokens_.size();
  part.want_last = reaches_end;
  part.all_logits = sink != nullptr;
  const size_t first = n_evaluated_;
  part.on_logits = [this, sink, sink_base, first, reaches_end, n](size_t i, std::span<const float> row) {
    if (sink && first + i >= sink_base) (*sink)(first + i - sink_base, row);
    if (reaches_end && i + 1 == n) {
      logits_.assign(row.begin(), row.end());
      logits_for_ = first + i;
    }
  };
  return part;
}

void Sequence::finish_part(const StepPart& part) {
  if (part.status == StepStatus::ok) n_evaluated_ += part.tokens.size();
}

StepStatus Sequence::evaluate_pending(const std::function<void(size_t, std::span<const float>)>* sink,
                                      size_t sink_base, const std::atomic<bool>* cancel) {
  const size_t start_evaluated = n_evaluated_;
  while (n_pending() > 0) {
    StepPart part = next_part(size_t(chunk_), sink, sink_base);
    ex_.step(cache_, std::span(&part, 1), cancel, order_);
    finish_part(part);
    if (part.status == StepStatus::cache_full) {
      // Nothing of this call stays: back to where it started.
      std::lock_guard lock(ex_.mutex());
      cut_cache_locked(start_evaluated);
      return StepStatus::cache_full;
    }
    if (part.status == StepStatus::cancelled) return StepStatus::cancelled;
  }
  return StepStatus::ok;
}

void Sequence::make_logits_pending() {
  if (logits_valid() || tokens_.empty() || n_evaluated_ != tokens_.size()) return;
  std::lock_guard lock(ex_.mutex());
  cut_cache_locked(n_evaluated_ - 1);
}

StepStatus Sequence::ensure_logits(const std::atomic<bool>* cancel) {
  if (logits_valid()) return StepStatus::ok;
  if (tokens_.empty()) fail(ErrorCode::invalid_argument, "the session is empty: give a prompt first");
  make_logits_pending();
  return evaluate_pending(nullptr, 0, cancel);
}

void Sequence::cut_cache_locked(size_t n) {
  if (!cache_.truncate(id_, int32_t(n))) {
    cache_.remove(id_);
    n_evaluated_ = 0;
  } else {
    ex_.apply_sink_moves(cache_, id_);  // a cut into a stepwise step replays its kept tokens
    n_evaluated_ = std::min(n_evaluated_, n);
  }
}

void Sequence::rewind(size_t n) {
  require(n <= tokens_.size(), "rewind: position {} is outside [0, {}]", n, tokens_.size());
  if (n == tokens_.size()) return;
  if (n < n_evaluated_) {
    std::lock_guard lock(ex_.mutex());
    cut_cache_locked(n);
  }
  // Dropping only pending tokens keeps the logits of the last evaluated token valid.
  tokens_.resize(n);
}

void Sequence::drop_cache() {
  std::lock_guard lock(ex_.mutex());
  cache_.remove(id_);
  n_evaluated_ = 0;
  logits_for_ = SIZE_MAX;
}

bool Sequence::share_prefix(const Sequence& donor, size_t n) {
  if (&donor.cache_ != &cache_ || n == 0 || n > donor.n_evaluated_ || n_evaluated_ != 0) return false;
  if (!std::equal(donor.tokens_.begin(), donor.tokens_.begin() + long(n), tokens_.begin(),
                  tokens_.begin() + long(std::min(n, tokens_.size()))) ||
      tokens_.size() < n)
    return false;
  std::lock_guard lock(ex_.mutex());
  // With an exact window the donor must still hold the prefix's newest tokens in it:
  // refilled from quantized rows they would change this sequence's output.
  if (!cache_.exact_holds(donor.id_, int32_t(n))) return false;
  cache_.fork_from(cache_, donor.id_, id_);
  if (!cache_.truncate(id_, int32_t(n))) {
    cache_.remove(id_);
    return false;
  }
  n_evaluated_ = n;
  return true;
}

void Sequence::restore(std::vector<int32_t> tokens, size_t n_evaluated, std::vector<float> logits, size_t logits_for,
                       std::string_view kv_blob) {
  std::lock_guard lock(ex_.mutex());
  // Load into a scratch id first, so that a bad blob leaves this sequence as it was.
  const int32_t scratch = ex_.new_sequence_id();
  try {
    cache_.load(scratch, kv_blob);
    if (cache_.next_index(scratch) != int64_t(n_evaluated))
      fail(ErrorCode::invalid_argument, "session state: {} tokens evaluated, but its KV cache holds {}", n_evaluated,
           cache_.next_index(scratch));
  } catch (...) {
    cache_.remove(scratch);
    throw;
  }
  cache_.remove(id_);
  cache_.fork_from(cache_, scratch, id_);
  cache_.remove(scratch);
  tokens_ = std::move(tokens);
  n_evaluated_ = n_evaluated;
  logits_ = std::move(logits);
  logits_for_ = logits_for;
}

void Sequence::save_cache(std::string& out) const {
  std::lock_guard lock(ex_.mutex());
  cache_.save(id_, out);
}

}  // namespace ember::runtime
