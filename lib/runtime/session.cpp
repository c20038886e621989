// ember::Session: one sequence over the model, with chunked prefill, decoding,
// streaming generation, cancellation and rewind.
#include "ember/session.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "common/fail.hpp"
#include "kv/kv_cache.hpp"
#include "runtime/generation.hpp"
#include "runtime/speculative.hpp"
#include "runtime/model_impl.hpp"
#include "runtime/sequence.hpp"

namespace ember {

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

const char* to_string(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::ok: return "ok";
    case Outcome::cancelled: return "cancelled";
    case Outcome::cache_full: return "cache_full";
  }
  return "unknown";
}

struct Session::Impl {
  std::shared_ptr<const Model> model;
  const Model::Impl& m;
  SessionOptions options;
  runtime::Sequence seq;
  std::atomic<bool> cancel_flag{false};

  Impl(std::shared_ptr<const Model> owner, const SessionOptions& opts)
      : model(owner), m(model->impl()), options(opts), seq(std::move(owner), opts.kv, opts.prefill_chunk_size) {
    if (opts.batch_invariant) seq.set_sum_order(backend::SumOrder::batch_invariant);
    require(options.threads >= 0 && options.threads <= 1024, "SessionOptions::threads must be in [0, 1024], got {}",
            options.threads);
    m.logger.debug("session {}: KV capacity {} tokens, prefill chunk {}", seq.id(), seq.capacity(), seq.chunk());
  }
  Impl(const Impl& other) : model(other.model), m(other.m), options(other.options), seq(other.seq) {}

  // A cancel() that came while no call ran: consumed by this call, which then does nothing.
  bool take_early_cancel() { return cancel_flag.exchange(false); }

  // Appends `extra` and evaluates every pending token; `sink` gets the rows of `extra`.
  Outcome evaluate(std::span<const int32_t> extra, const std::function<void(size_t, std::span<const float>)>* sink) {
    if (take_early_cancel()) return Outcome::cancelled;
    const size_t old_size = seq.tokens().size();
    if (!seq.evicts() && old_size + extra.size() > size_t(seq.capacity())) return Outcome::cache_full;
    seq.append(extra);
    switch (seq.evaluate_pending(sink, old_size, &cancel_flag)) {
      case runtime::StepStatus::ok: return Outcome::ok;
      case runtime::StepStatus::cancelled:
        cancel_flag.store(false);
        seq.drop_pending(std::max(old_size, seq.n_evaluated()));
        return Outcome::cancelled;
      case runtime::StepStatus::cache_full:
        seq.drop_pending(old_size);
        return Outcome::cache_full;
    }
    return Outcome::ok;
  }

  std::vector<int32_t> tokenize_prompt(std::string_view text, bool add_bos, bool parse_special) const {
    return m.require_tokenizer().encode(text, add_bos && seq.tokens().empty(), parse_special);
  }

  GenerateResult generate(std::span<const int32_t> prompt, Sampler& sampler, const GenerateOptions& opts,
                          runtime::TokenSink sink);

  // A piece callback as a token sink: it sees only non-empty text.
  static runtime::TokenSink piece_sink(const TokenCallback& on_piece) {
    if (!on_piece) return {};
    return [&on_piece](const TokenEvent& e) { return e.text.empty() ? Control::proceed : on_piece(e.text); };
  }
};

GenerateResult Session::Impl::generate(std::span<const int32_t> prompt, Sampler& sampler, const GenerateOptions& opts,
                                       runtime::TokenSink sink) {
  // Speculation: its options are checked (and a draft model's vocabulary) before
  // the prompt joins the sequence. Under KV eviction its steps are placed token by
  // token (docs/speculative.md).
  std::unique_ptr<runtime::DraftSource> drafts = runtime::make_draft_source(opts.speculative, *model, seq.capacity());
  // Speculative steps sum in the batch-invariant order, and so does the whole call.
  const backend::SumOrder order = seq.sum_order();
  if (drafts) seq.set_sum_order(backend::SumOrder::batch_invariant);
  struct RestoreOrder {
    runtime::Sequence& seq;
    backend::SumOrder order;
    ~RestoreOrder() { seq.set_sum_order(order); }
  } restore{seq, order};

  runtime::Generation generation(seq, sampler, opts, std::move(sink), prompt);
  if (take_early_cancel()) generation.finish(StopReason::cancelled);
  while (!generation.done()) {
    if (drafts && !generation.prefilling() && !generation.result().tokens.empty()) {
      runtime::run_speculative(generation, seq, *drafts, opts.speculative, cancel_flag,
                               generation.result().speculative);
      break;
    }
    if (cancel_flag.exchange(false)) {
      generation.finish(StopReason::cancelled);
      break;
    }
    runtime::StepPart part = generation.next_part(size_t(seq.chunk()));
    if (!part.tokens.empty()) seq.executor().step(seq.cache(), std::span(&part, 1), &cancel_flag, seq.sum_order());
    if (part.status == runtime::StepStatus::cancelled) cancel_flag.store(false);
    generation.after_step(part);
  }
  return std::move(generation.result());
}

// ---- Session ----

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

const Model& Session::model() const { return *impl_->model; }
const SessionOptions& Session::options() const { return impl_->options; }

Outcome Session::prefill(std::span<const int32_t> tokens) { return impl_->evaluate(tokens, nullptr); }

Outcome Session::prefill(std::string_view text, bool add_bos, bool parse_special) {
  const auto ids = impl_->tokenize_prompt(text, add_bos, parse_special);
  return prefill(ids);
}

Outcome Session::decode(int32_t token) { return impl_->evaluate(std::span(&token, 1), nullptr); }

std::span<const float> Session::logits() const {
  if (!impl_->seq.logits_valid()) return {};
  return impl_->seq.logits();
}

std::vector<float> Session::evaluate(std::span<const int32_t> tokens) {
  const auto n_vocab = size_t(impl_->m.loaded->hparams.n_vocab);
  std::vector<float> all(tokens.size() * n_vocab);
  const Outcome outcome = evaluate(tokens, [&](size_t index, std::span<const float> row) {
    std::copy(row.begin(), row.end(), all.begin() + long(index * n_vocab));
  });
  if (outcome != Outcome::ok) all.clear();
  return all;
}

Outcome Session::evaluate(std::span<const int32_t> tokens, const LogitsCallback& on_logits) {
  const std::function<void(size_t, std::span<const float>)> sink = [&](size_t index, std::span<const float> row) {
    on_logits(index, row);
  };
  return impl_->evaluate(tokens, on_logits ? &sink : nullptr);
}

GenerateResult Session::generate(std::string_view prompt, Sampler& sampler, const GenerateOptions& options,
                                 const TokenCallback& on_piece) {
  return generate(prompt, sampler, options, TokenEventCallback(Impl::piece_sink(on_piece)));
}

GenerateResult Session::generate(std::span<const int32_t> prompt, Sampler& sampler, const GenerateOptions& options,
                                 const TokenCallback& on_piece) {
  return generate(prompt, sampler, options, TokenEventCallback(Impl::piece_sink(on_piece)));
}

GenerateResult Session::generate(std::string_view prompt, Sampler& sampler, const GenerateOptions& options,
                                 const TokenEventCallback& on_token) {
  const auto ids = prompt.empty() ? std::vector<int32_t>{}
                                  : impl_->tokenize_prompt(prompt, options.add_bos, options.parse_special);
  return impl_->generate(ids, sampler, options, runtime::TokenSink(on_token));
}

GenerateResult Session::generate(std::span<const int32_t> prompt, Sampler& sampler, const GenerateOptions& options,
                                 const TokenEventCallback& on_token) {
  return impl_->generate(prompt, sampler, options, runtime::TokenSink(on_token));
}

void Session::cancel() noexcept { impl_->cancel_flag.store(true); }

void Session::rewind(int32_t n_tokens) {
  require(n_tokens >= 0 && size_t(n_tokens) <= impl_->seq.tokens().size(), "rewind: position {} is outside [0, {}]",
          n_tokens, impl_->seq.tokens().size());
  impl_->seq.rewind(size_t(n_tokens));
}

void Session::reset() { rewind(0); }

int32_t Session::position() const { return int32_t(impl_->seq.tokens().size()); }
std::span<const int32_t> Session::tokens() const { return impl_->seq.tokens(); }
int32_t Session::capacity() const { return impl_->seq.capacity(); }

std::unique_ptr<Session> Session::fork() const {
  return std::unique_ptr<Session>(new Session(std::make_unique<Impl>(*impl_)));
}

KVSessionMemory Session::kv_memory() const {
  const runtime::Sequence& seq = impl_->seq;
  kv::SeqStats st, window;
  {
    std::lock_guard lock(seq.executor().mutex());
    st = seq.cache().stats(seq.id());
    if (const kv::KVCache* exact = seq.cache().exact()) window = exact->stats(seq.id());
  }
  KVSessionMemory mem;
  mem.tokens = st.tokens;
  mem.pages = st.pages;
  mem.shared_pages = st.shared_pages;
  mem.page_bytes = seq.cache().pool().page_bytes();
  mem.bytes = size_t(st.pages) * mem.page_bytes;
  if (const kv::KVCache* exact = seq.cache().exact()) {
    mem.exact_pages = window.pages;
    mem.exact_bytes = size_t(window.pages) * exact->pool().page_bytes();
  }
  return mem;
}

// ---- state blobs ----
//
//   "EMBRSESS" | u32 version | u64 model fingerprint | KV options | tokens |
//   u64 n_evaluated | u64 logits_for | logits | KV-cache blob | u64 FNV-1a of all before
namespace {

constexpr char kStateMagic[8] = {'E', 'M', 'B', 'R', 'S', 'E', 'S', 'S'};
// 2: INT8/INT4 caches hold keys minus their layer's BOS key (model/forward.hpp);
// version-1 blobs of F16/F32 caches are the same bytes and still load.
constexpr uint32_t kStateVersion = 2;

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
  const runtime::Sequence& seq = s.seq;
  std::string out(kStateMagic, sizeof kStateMagic);
  put(out, kStateVersion);
  put(out, model_fingerprint(s.model->info()));
  put_kv_options(out, s.options.kv);
  put<uint64_t>(out, seq.tokens().size());
  out.append(reinterpret_cast<const char*>(seq.tokens().data()), seq.tokens().size() * sizeof(int32_t));
  put<uint64_t>(out, seq.n_evaluated());
  put<uint64_t>(out, seq.logits_for());
  put<uint64_t>(out, seq.logits().size());
  out.append(reinterpret_cast<const char*>(seq.logits().data()), seq.logits().size() * sizeof(float));
  std::string kv_blob;
  seq.save_cache(kv_blob);
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
  const bool quantized = s.options.kv.storage != KVStorage::f16 && s.options.kv.storage != KVStorage::f32;
  if (version == 1 && quantized)
    fail(ErrorCode::invalid_argument,
         "session state: version 1 blobs of INT8/INT4 caches hold uncentred keys, which this build (version {}) "
         "cannot use; save the state again with this build",
         kStateVersion);
  if (version != kStateVersion && version != 1)
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
  if (!tok_bytes.empty()) std::memcpy(tokens.data(), tok_bytes.data(), tok_bytes.size());
  const int32_t n_vocab = s.m.loaded->hparams.n_vocab;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= n_vocab)
      fail(ErrorCode::invalid_argument, "session state: token {} is {}, outside the vocabulary of {}", i, tokens[i],
           n_vocab);
  const auto n_evaluated = r.get<uint64_t>();
  const auto logits_for = r.get<uint64_t>();
  const auto n_logits = r.get<uint64_t>();
  if (n_evaluated > n_tokens || (n_logits != 0 && (n_logits != uint64_t(n_vocab) || logits_for >= n_evaluated)))
    fail(ErrorCode::invalid_argument, "session state: inconsistent counts");
  std::vector<float> logits(static_cast<size_t>(n_logits));
  const std::string_view logit_bytes = r.bytes(n_logits * sizeof(float));
  if (!logit_bytes.empty()) std::memcpy(logits.data(), logit_bytes.data(), logit_bytes.size());
  const std::string_view kv_blob = r.bytes(r.get<uint64_t>());
  if (r.at != r.data.size()) fail(ErrorCode::invalid_argument, "session state: unexpected trailing bytes");

  s.seq.restore(std::move(tokens), size_t(n_evaluated), std::move(logits), size_t(logits_for), kv_blob);
}

// Model::new_session lives here, beside Session::Impl.
std::unique_ptr<Session> Model::new_session(const SessionOptions& options) const {
  return std::unique_ptr<Session>(new Session(std::make_unique<Session::Impl>(shared_from_this(), options)));
}
std::unique_ptr<Session> Model::new_session() const { return new_session(SessionOptions{}); }

}  // namespace ember
