// ember::Session: one sequence over the model, with chunked prefill, decoding,
// streaming generation, cancellation and rewind.
#include "ember/session.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "common/fail.hpp"
#include "kv/kv_cache.hpp"
#include "model/forward.hpp"
#include "runtime/backend_factory.hpp"
#include "runtime/model_impl.hpp"
#include "runtime/stop_strings.hpp"

namespace ember {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The one sequence id a Session uses in its own cache.
constexpr int32_t kSeq = 0;

}  // namespace

const char* to_string(StopReason reason) noexcept {
  switch (reason) {
    case StopReason::max_tokens: return "max_tokens";
    case StopReason::end_of_generation: return "end_of_generation";
    case StopReason::stop_token: return "stop_token";
    case StopReason::stop_string: return "stop_string";
    case StopReason::callback: return "callback";
    case StopReason::cancelled: return "cancelled";
    case StopReason::context_full: return "context_full";
  }
  return "unknown";
}

struct Session::Impl {
  std::shared_ptr<const Model> model;
  const Model::Impl& m;
  SessionOptions options;
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<kv::KVCache> cache;
  std::unique_ptr<model::Forward> forward;
  int32_t capacity = 0;

  // tokens[0, n_evaluated) are in the KV cache; the rest (at most the last sampled
  // token) are pending and evaluated by the next call that needs logits.
  std::vector<int32_t> tokens;
  size_t n_evaluated = 0;
  std::vector<float> logits;   // next-token logits after tokens[logits_for]
  size_t logits_for = SIZE_MAX;
  bool logits_valid() const {
    return !tokens.empty() && n_evaluated == tokens.size() && logits_for == tokens.size() - 1;
  }
  std::atomic<bool> cancel_flag{false};

  Impl(std::shared_ptr<const Model> owner, const SessionOptions& opts)
      : model(std::move(owner)), m(model->impl()), options(opts) {
    if (!m.loaded)
      fail(ErrorCode::invalid_argument, "the model was loaded with vocab_only; it has no weights to run sessions on");
    const KVCacheOptions& kv = options.kv;
    require(kv.max_tokens >= 1 && kv.max_tokens <= (1 << 24), "KVCacheOptions::max_tokens must be in [1, 2^24], got {}",
            kv.max_tokens);
    require(options.prefill_chunk_size >= 1 && options.prefill_chunk_size <= 65536,
            "SessionOptions::prefill_chunk_size must be in [1, 65536], got {}", options.prefill_chunk_size);
    require(options.threads >= 0 && options.threads <= 1024, "SessionOptions::threads must be in [0, 1024], got {}",
            options.threads);
    const model::HParams& hp = m.loaded->hparams;
    const quant::DType storage = runtime::kv_dtype(kv.storage, kv.group_size);
    if (storage != quant::DType::f16 && storage != quant::DType::f32 &&
        hp.head_dim_k % int(quant::type_info(storage).block_elems) != 0)
      fail(ErrorCode::invalid_argument, "KVCacheOptions: a head of {} values is not a whole number of groups of {}",
           hp.head_dim_k, kv.group_size);

    kv::CacheConfig cfg;
    cfg.n_layer = hp.n_layer;
    for (const model::LayerParams& lp : hp.layers) cfg.layer_window.push_back(lp.window);
    int32_t chunk = options.prefill_chunk_size;
    switch (kv.eviction) {
      case KVEviction::none:
        capacity = int32_t(std::min<int64_t>(kv.max_tokens, hp.n_ctx_train));
        cfg.max_seq_tokens = capacity;
        break;
      case KVEviction::streaming:
        require(kv.sinks >= 0 && kv.window >= 1 && int64_t(kv.sinks) + kv.window <= (1 << 24),
                "KVCacheOptions: StreamingLLM needs sinks >= 0 and window >= 1 (got {} and {})", kv.sinks, kv.window);
        require(kv.window > kv.sinks, "KVCacheOptions: the StreamingLLM window ({}) must be larger than the sinks ({})",
                kv.window, kv.sinks);
        cfg.eviction = {kv::Eviction::streaming, kv.sinks, 0, 0};
        cfg.max_seq_tokens = kv.sinks + kv.window;
        capacity = INT32_MAX;
        chunk = std::min(chunk, std::max(1, kv.window / 2));
        break;
      case KVEviction::h2o:
        require(kv.heavy >= 0 && kv.recent >= 1 && int64_t(kv.heavy) + kv.recent <= (1 << 24),
                "KVCacheOptions: H2O needs heavy >= 0 and recent >= 1 (got {} and {})", kv.heavy, kv.recent);
        cfg.eviction = {kv::Eviction::h2o, 0, kv.heavy, kv.recent};
        cfg.max_seq_tokens = kv.heavy + kv.recent;
        capacity = INT32_MAX;
        chunk = std::min(chunk, kv.recent);
        break;
      default:
        fail(ErrorCode::invalid_argument, "KVCacheOptions::eviction has an unknown value {}", int(kv.eviction));
    }
    backend = runtime::make_backend(m.options.backend, options.threads == 0 ? m.threads : options.threads);
    cache = std::make_unique<kv::KVCache>(m.kv_pool(storage), *backend, cfg);
    forward = std::make_unique<model::Forward>(hp, m.loaded->weights, *backend, chunk);
    m.logger.debug("session: KV budget {} tokens, {} storage, {} threads", cfg.max_seq_tokens,
                   quant::type_name(storage), options.threads == 0 ? m.threads : options.threads);
  }

  // Forgets the cache from `n` tokens on; when cells the shorter context needs are
  // gone (window, eviction), forgets all of it: the tokens are evaluated again.
  void cut_cache(size_t n) {
    if (!cache->truncate(kSeq, int32_t(n))) {
      cache->remove(kSeq);
      n_evaluated = 0;
    } else {
      n_evaluated = std::min(n_evaluated, n);
    }
  }

  // Appends `extra` and evaluates every pending token. `sink` (optional) receives
  // the logits of the rows of `extra`. Returns false when cancelled: the part
  // evaluated stays, the rest of `extra` is dropped. Throws with nothing changed.
  bool evaluate(std::span<const int32_t> extra, const model::Forward::LogitsSink* sink) {
    const size_t old_size = tokens.size();
    const size_t first_new = old_size - n_evaluated;  // batch index of extra[0]
    if (options.kv.eviction == KVEviction::none && old_size + extra.size() > size_t(capacity))
      fail(ErrorCode::cache_full, "the context holds {} of {} tokens; {} more do not fit", old_size, capacity,
           extra.size());
    std::vector<model::BatchToken> batch;
    batch.reserve(old_size - n_evaluated + extra.size());
    for (size_t i = n_evaluated; i < old_size; ++i) batch.push_back({tokens[i], int32_t(i), kSeq, false});
    for (size_t i = 0; i < extra.size(); ++i)
      batch.push_back({extra[i], int32_t(old_size + i), kSeq, sink != nullptr});
    if (batch.empty()) return true;
    batch.back().logits = true;
    forward->validate(batch);

    const size_t last = batch.size() - 1;
    const size_t done = forward->run(
        *cache, batch,
        [&](size_t index, std::span<const float> row) {
          if (sink && index >= first_new) (*sink)(index - first_new, row);
          if (index == last) {
            logits.assign(row.begin(), row.end());
            logits_for = n_evaluated + last;
          }
        },
        &cancel_flag);
    tokens.insert(tokens.end(), extra.begin(), extra.end());
    const size_t evaluated_before = n_evaluated;
    n_evaluated += done;
    if (done < batch.size()) {
      tokens.resize(std::max(old_size, evaluated_before + done));
      return false;
    }
    return true;
  }

  // Makes `logits` valid for the current context. Returns false if cancelled.
  bool ensure_logits() {
    if (logits_valid()) return true;
    if (tokens.empty()) fail(ErrorCode::invalid_argument, "the session is empty: give a prompt first");
    if (n_evaluated == tokens.size()) {
      // Evaluated but logits lost (cancellation): evaluate the last token again.
      cut_cache(n_evaluated - 1);
    }
    return evaluate({}, nullptr);
  }

  std::vector<int32_t> tokenize_prompt(std::string_view text, bool add_bos, bool parse_special) const {
    return m.require_tokenizer().encode(text, add_bos && tokens.empty(), parse_special);
  }

  GenerateResult generate(std::span<const int32_t> prompt, Sampler& sampler, const GenerateOptions& opts,
                          const TokenCallback& on_piece);
};

GenerateResult Session::Impl::generate(std::span<const int32_t> prompt, Sampler& sampler, const GenerateOptions& opts,
                                       const TokenCallback& on_piece) {
  require(opts.max_tokens >= 0 && opts.max_tokens <= (1 << 24), "GenerateOptions::max_tokens must be in [0, 2^24], got {}",
          opts.max_tokens);
  const tok::Tokenizer& tokenizer = m.require_tokenizer();
  for (int32_t t : opts.stop_tokens)
    require(t >= 0 && t < tokenizer.n_vocab(), "stop token {} is outside the vocabulary [0, {})", t, tokenizer.n_vocab());
  if (prompt.empty() && tokens.empty())
    fail(ErrorCode::invalid_argument, "generate: the prompt is empty and the session holds no tokens");

  GenerateResult result;
  const auto start = Clock::now();
  result.metrics.prompt_tokens = int32_t(prompt.size() + (tokens.size() - n_evaluated));
  if (!evaluate(prompt, nullptr) || !ensure_logits()) {
    result.stop_reason = StopReason::cancelled;
    result.metrics.prefill_seconds = seconds_since(start);
    return result;
  }
  for (int32_t t : prompt) sampler.accept(t);
  result.metrics.prefill_seconds = seconds_since(start);
  const auto decode_start = Clock::now();

  tok::StreamDecoder decoder(tokenizer);
  runtime::StopStringFilter filter(opts.stop_strings);
  bool callback_stopped = false;
  auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    result.text += text;
    if (on_piece && !callback_stopped && on_piece(text) == Control::stop) callback_stopped = true;
  };

  result.stop_reason = StopReason::max_tokens;
  for (int32_t i = 0; i < opts.max_tokens; ++i) {
    if (cancel_flag.load()) {
      result.stop_reason = StopReason::cancelled;
      break;
    }
    if (options.kv.eviction == KVEviction::none && tokens.size() >= size_t(capacity)) {
      result.stop_reason = StopReason::context_full;
      break;
    }
    const int32_t token = sampler.sample(logits);
    if (i == 0) result.metrics.time_to_first_token = seconds_since(start);
    if (std::find(opts.stop_tokens.begin(), opts.stop_tokens.end(), token) != opts.stop_tokens.end()) {
      result.stop_reason = StopReason::stop_token;
      break;
    }
    if (opts.stop_at_end_of_generation && tokenizer.is_end_of_generation(token)) {
      result.stop_reason = StopReason::end_of_generation;
      break;
    }
    sampler.accept(token);
    tokens.push_back(token);  // pending until the next evaluation
    result.tokens.push_back(token);
    ++result.metrics.generated_tokens;
    emit(filter.push(decoder.push(token)));
    if (filter.stopped()) {
      result.stop_reason = StopReason::stop_string;
      break;
    }
    if (callback_stopped) {
      result.stop_reason = StopReason::callback;
      break;
    }
    if (i + 1 == opts.max_tokens) break;
    if (!evaluate({}, nullptr)) {
      result.stop_reason = StopReason::cancelled;
      break;
    }
  }
  if (!filter.stopped()) {
    const std::string tail = filter.push(decoder.flush()) + filter.flush();
    if (callback_stopped) {
      result.text += tail;
    } else {
      emit(tail);
    }
  }
  result.metrics.decode_seconds = seconds_since(decode_start);
  return result;
}

// ---- Session ----

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

const Model& Session::model() const { return *impl_->model; }
const SessionOptions& Session::options() const { return impl_->options; }

bool Session::prefill(std::span<const int32_t> tokens) {
  impl_->cancel_flag.store(false);
  return impl_->evaluate(tokens, nullptr);
}

bool Session::prefill(std::string_view text, bool add_bos, bool parse_special) {
  const auto ids = impl_->tokenize_prompt(text, add_bos, parse_special);
  return prefill(ids);
}

void Session::decode(int32_t token) {
  impl_->cancel_flag.store(false);
  impl_->evaluate(std::span(&token, 1), nullptr);
}

std::span<const float> Session::logits() const {
  if (!impl_->logits_valid()) return {};
  return impl_->logits;
}

std::vector<float> Session::evaluate(std::span<const int32_t> tokens) {
  const auto n_vocab = size_t(impl_->m.loaded->hparams.n_vocab);
  std::vector<float> all(tokens.size() * n_vocab);
  evaluate(tokens, [&](size_t index, std::span<const float> row) {
    std::copy(row.begin(), row.end(), all.begin() + long(index * n_vocab));
  });
  return all;
}

bool Session::evaluate(std::span<const int32_t> tokens, const LogitsCallback& on_logits) {
  impl_->cancel_flag.store(false);
  const model::Forward::LogitsSink sink = [&](size_t index, std::span<const float> row) { on_logits(index, row); };
  return impl_->evaluate(tokens, on_logits ? &sink : nullptr);
}

GenerateResult Session::generate(std::string_view prompt, Sampler& sampler, const GenerateOptions& options,
                                 const TokenCallback& on_piece) {
  impl_->cancel_flag.store(false);
  const auto ids = prompt.empty() ? std::vector<int32_t>{}
                                  : impl_->tokenize_prompt(prompt, options.add_bos, options.parse_special);
  return impl_->generate(ids, sampler, options, on_piece);
}

GenerateResult Session::generate(std::span<const int32_t> prompt, Sampler& sampler, const GenerateOptions& options,
                                 const TokenCallback& on_piece) {
  impl_->cancel_flag.store(false);
  return impl_->generate(prompt, sampler, options, on_piece);
}

void Session::cancel() noexcept { impl_->cancel_flag.store(true); }

void Session::rewind(int32_t n_tokens) {
  Impl& s = *impl_;
  require(n_tokens >= 0 && size_t(n_tokens) <= s.tokens.size(), "rewind: position {} is outside [0, {}]", n_tokens,
          s.tokens.size());
  if (size_t(n_tokens) == s.tokens.size()) return;
  if (size_t(n_tokens) < s.n_evaluated) s.cut_cache(size_t(n_tokens));
  // Dropping only pending tokens keeps the logits of the last evaluated token valid.
  s.tokens.resize(size_t(n_tokens));
}

void Session::reset() { rewind(0); }

int32_t Session::position() const { return int32_t(impl_->tokens.size()); }
std::span<const int32_t> Session::tokens() const { return impl_->tokens; }
int32_t Session::capacity() const { return impl_->capacity; }

std::unique_ptr<Session> Session::fork() const {
  const Impl& s = *impl_;
  auto impl = std::make_unique<Impl>(s.model, s.options);
  impl->cache->fork_from(*s.cache, kSeq, kSeq);
  impl->tokens = s.tokens;
  impl->n_evaluated = s.n_evaluated;
  impl->logits = s.logits;
  impl->logits_for = s.logits_for;
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

KVSessionMemory Session::kv_memory() const {
  const kv::SeqStats st = impl_->cache->stats(kSeq);
  KVSessionMemory mem;
  mem.tokens = st.tokens;
  mem.pages = st.pages;
  mem.shared_pages = st.shared_pages;
  mem.page_bytes = impl_->cache->pool().page_bytes();
  mem.bytes = size_t(st.pages) * mem.page_bytes;
  return mem;
}

// ---- state blobs ----
//
//   "EMBRSESS" | u32 version | u64 model fingerprint | KV options | tokens |
//   u64 n_evaluated | u64 logits_for | logits | KV-cache blob | u64 FNV-1a of all before
namespace {

constexpr char kStateMagic[8] = {'E', 'M', 'B', 'R', 'S', 'E', 'S', 'S'};
constexpr uint32_t kStateVersion = 1;

uint64_t fnv1a(std::string_view bytes, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

uint64_t model_fingerprint(const ModelInfo& i) {
  std::string key = i.architecture;
  for (int64_t v : {int64_t(i.n_layer), i.n_embd, i.n_vocab, int64_t(i.n_head), int64_t(i.n_head_kv),
                    int64_t(i.head_dim), int64_t(i.file_bytes), int64_t(i.weight_bytes)})
    key.append(reinterpret_cast<const char*>(&v), sizeof v);
  return fnv1a(key);
}

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

struct StateReader {
  std::string_view data;
  size_t at = 0;
  template <typename T>
  T get() {
    if (data.size() - at < sizeof(T))
      fail(ErrorCode::invalid_argument, "session state: the blob ends early (byte {} of {})", at, data.size());
    T v;
    std::memcpy(&v, data.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::string_view bytes(uint64_t n) {
    if (data.size() - at < n)
      fail(ErrorCode::invalid_argument, "session state: the blob ends early (byte {} of {})", at, data.size());
    const std::string_view v = data.substr(at, size_t(n));
    at += size_t(n);
    return v;
  }
};

void put_kv_options(std::string& out, const KVCacheOptions& kv) {
  for (int32_t v : {int32_t(kv.storage), kv.group_size, int32_t(kv.eviction), kv.sinks, kv.window, kv.heavy,
                    kv.recent, kv.max_tokens})
    put(out, v);
}

}  // namespace

std::string Session::save_state() const {
  const Impl& s = *impl_;
  std::string out(kStateMagic, sizeof kStateMagic);
  put(out, kStateVersion);
  put(out, model_fingerprint(s.model->info()));
  put_kv_options(out, s.options.kv);
  put<uint64_t>(out, s.tokens.size());
  out.append(reinterpret_cast<const char*>(s.tokens.data()), s.tokens.size() * sizeof(int32_t));
  put<uint64_t>(out, s.n_evaluated);
  put<uint64_t>(out, s.logits_for);
  put<uint64_t>(out, s.logits.size());
  out.append(reinterpret_cast<const char*>(s.logits.data()), s.logits.size() * sizeof(float));
  std::string kv_blob;
  s.cache->save(kSeq, kv_blob);
  put<uint64_t>(out, kv_blob.size());
  out += kv_blob;
  put(out, fnv1a(out));
  return out;
}

void Session::load_state(std::string_view blob) {
  Impl& s = *impl_;
  if (blob.size() < sizeof kStateMagic + 12 || std::memcmp(blob.data(), kStateMagic, sizeof kStateMagic) != 0)
    fail(ErrorCode::invalid_argument, "session state: not an ember session blob");
  StateReader r{blob.substr(0, blob.size() - 8), sizeof kStateMagic};
  const auto version = r.get<uint32_t>();
  if (version != kStateVersion)
    fail(ErrorCode::invalid_argument, "session state: version {} is not supported (this build reads {})", version,
         kStateVersion);
  uint64_t checksum;
  std::memcpy(&checksum, blob.data() + blob.size() - 8, 8);
  if (checksum != fnv1a(blob.substr(0, blob.size() - 8)))
    fail(ErrorCode::invalid_argument, "session state: checksum mismatch (the blob is corrupted)");
  if (r.get<uint64_t>() != model_fingerprint(s.model->info()))
    fail(ErrorCode::invalid_argument, "session state: saved with another model");
  std::string mine;
  put_kv_options(mine, s.options.kv);
  if (r.bytes(mine.size()) != mine)
    fail(ErrorCode::invalid_argument, "session state: saved with other KV-cache options (storage, eviction, budget)");
  const auto n_tokens = r.get<uint64_t>();
  if (n_tokens > (uint64_t(1) << 28)) fail(ErrorCode::invalid_argument, "session state: {} tokens", n_tokens);
  std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
  const std::string_view tok_bytes = r.bytes(n_tokens * sizeof(int32_t));
  std::memcpy(tokens.data(), tok_bytes.data(), tok_bytes.size());
  const auto n_evaluated = r.get<uint64_t>();
  const auto logits_for = r.get<uint64_t>();
  const auto n_logits = r.get<uint64_t>();
  if (n_evaluated > n_tokens || (n_logits != 0 && n_logits != uint64_t(s.m.loaded->hparams.n_vocab)))
    fail(ErrorCode::invalid_argument, "session state: inconsistent counts");
  std::vector<float> logits(static_cast<size_t>(n_logits));
  const std::string_view logit_bytes = r.bytes(n_logits * sizeof(float));
  std::memcpy(logits.data(), logit_bytes.data(), logit_bytes.size());
  const std::string_view kv_blob = r.bytes(r.get<uint64_t>());
  if (r.at != r.data.size()) fail(ErrorCode::invalid_argument, "session state: unexpected trailing bytes");

  // Load the cache into a fresh one first, so that a failure leaves this session as it was.
  kv::KVCache fresh(s.cache->shared_pool(), *s.backend, s.cache->config());
  fresh.load(kSeq, kv_blob);
  s.cache->clear();
  s.cache->fork_from(fresh, kSeq, kSeq);
  s.tokens = std::move(tokens);
  s.n_evaluated = size_t(n_evaluated);
  s.logits = std::move(logits);
  s.logits_for = size_t(logits_for);
}

// Model::new_session lives here, beside Session::Impl.
std::unique_ptr<Session> Model::new_session(const SessionOptions& options) const {
  return std::unique_ptr<Session>(new Session(std::make_unique<Session::Impl>(shared_from_this(), options)));
}
std::unique_ptr<Session> Model::new_session() const { return new_session(SessionOptions{}); }

}  // namespace ember
