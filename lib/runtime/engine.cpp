// ember::Engine: requests, their lifetime, and the two ways to drive the scheduler
// (a thread of the engine's own, or step() from the host's loop).
#include <algorithm>
#include <cmath>

#include "common/fail.hpp"
#include "runtime/engine_impl.hpp"

namespace ember {
namespace {

void check_options(const EngineOptions& o) {
  require(o.max_batch_size >= 1 && o.max_batch_size <= 1024, "EngineOptions::max_batch_size must be in [1, 1024], got {}",
          o.max_batch_size);
  require(o.max_batch_tokens >= 1 && o.max_batch_tokens <= 65536,
          "EngineOptions::max_batch_tokens must be in [1, 65536], got {}", o.max_batch_tokens);
  require(o.prefill_chunk_size >= 1 && o.prefill_chunk_size <= 65536,
          "EngineOptions::prefill_chunk_size must be in [1, 65536], got {}", o.prefill_chunk_size);
  require(o.max_waiting >= 1 && o.max_waiting <= (1 << 24), "EngineOptions::max_waiting must be in [1, 2^24], got {}",
          o.max_waiting);
  require(std::isfinite(o.slo_ttft_seconds) && o.slo_ttft_seconds >= 0,
          "EngineOptions::slo_ttft_seconds must be finite and >= 0, got {}", o.slo_ttft_seconds);
  require(std::isfinite(o.slo_tpot_seconds) && o.slo_tpot_seconds >= 0,
          "EngineOptions::slo_tpot_seconds must be finite and >= 0, got {}", o.slo_tpot_seconds);
  require(o.min_utilisation >= 0 && o.min_utilisation <= 1, "EngineOptions::min_utilisation must be in [0, 1], got {}",
          o.min_utilisation);
  require(o.min_acceptance >= 0 && o.min_acceptance <= 1, "EngineOptions::min_acceptance must be in [0, 1], got {}",
          o.min_acceptance);
  require(std::isfinite(o.price_per_hour) && o.price_per_hour >= 0,
          "EngineOptions::price_per_hour must be finite and >= 0, got {}", o.price_per_hour);
}

std::vector<metrics::AlertRule> alert_rules(const EngineOptions& o) {
  std::vector<metrics::AlertRule> rules;
  // Latency alerts fire at 1.5 times the objective, once a few requests back the P99.
  if (o.slo_ttft_seconds > 0) rules.push_back({"ttft_p99", metrics::Direction::above, 1.5 * o.slo_ttft_seconds, 0.1, 5});
  if (o.slo_tpot_seconds > 0) rules.push_back({"tpot_p99", metrics::Direction::above, 1.5 * o.slo_tpot_seconds, 0.1, 5});
  if (o.min_utilisation > 0) rules.push_back({"kv_utilisation", metrics::Direction::below, o.min_utilisation, 0.1, 1});
  if (o.min_acceptance > 0) rules.push_back({"acceptance", metrics::Direction::below, o.min_acceptance, 0.1, 16});
  return rules;
}

}  // namespace

const char* to_string(RequestState state) noexcept {
  switch (state) {
    case RequestState::waiting: return "waiting";
    case RequestState::running: return "running";
    case RequestState::finished: return "finished";
    case RequestState::rejected: return "rejected";
  }
  return "unknown";
}

Engine::Impl::Impl(std::shared_ptr<const Model> owner, const EngineOptions& opts)
    : model(std::move(owner)),
      m(model->impl()),
      options((check_options(opts), opts)),
      ex(m.executor()),
      cache(runtime::cache_for(ex, opts.kv)),
      alerts(alert_rules(opts)) {
  // A throwaway sequence checks the KV options and gives the context size.
  const runtime::Sequence probe(model, options.kv, options.prefill_chunk_size);
  capacity = probe.capacity();
}

Engine::Impl::~Impl() = default;

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<Engine> Engine::create(std::shared_ptr<const Model> model, const EngineOptions& options) {
  require(model != nullptr, "Engine::create: no model");
  if (!model->impl().loaded)
    fail(ErrorCode::invalid_argument, "the model was loaded with vocab_only; it has no weights to run an engine on");
  return std::unique_ptr<Engine>(new Engine(std::make_unique<Impl>(std::move(model), options)));
}

Engine::~Engine() {
  shutdown();
  stop();
}

const EngineOptions& Engine::options() const { return impl_->options; }

RequestHandle Engine::Impl::reject(std::shared_ptr<EngineRequest> r, std::string reason) {
  r->published.state = RequestState::rejected;
  r->published.error = std::move(reason);
  {
    std::lock_guard lock(metrics_mutex);
    ++counters.rejected;
  }
  {
    std::lock_guard lock(mutex);
    r->ended = true;
  }
  changed.notify_all();
  if (r->request.on_done) r->request.on_done(r->published);
  return r->handle;
}

RequestHandle Engine::submit(Request request) {
  Impl& e = *impl_;
  auto r = std::make_shared<EngineRequest>();
  r->request = std::move(request);
  r->submitted = EngineClock::now();
  bool shut_down = false;
  {
    std::lock_guard lock(e.mutex);
    r->handle = e.next_handle++;
    r->submit_order = e.next_submit++;
    e.requests.emplace(r->handle, r);
    shut_down = e.shut_down;
  }
  {
    std::lock_guard lock(e.metrics_mutex);
    ++e.counters.submitted;
  }
  if (shut_down) return e.reject(r, "the engine is shut down");

  const Request& q = r->request;
  const tok::Tokenizer& tokenizer = e.m.require_tokenizer();
  if (q.prompt_tokens.empty() && q.messages.empty() && q.prompt.empty())
    return e.reject(r, "the request has no prompt (prompt, prompt_tokens and messages are all empty)");
  try {
    if (!q.prompt_tokens.empty()) {
      r->prompt = q.prompt_tokens;
    } else if (!q.messages.empty()) {
      const std::string text = e.model->apply_chat_template(q.messages, true);
      r->prompt = tokenizer.encode(text, q.generate.add_bos, true);
    } else {
      r->prompt = tokenizer.encode(q.prompt, q.generate.add_bos, q.generate.parse_special);
    }
    r->sampler.emplace(q.sampler);
    // Speculation: checked here (a bad option rejects the request).
    r->drafts = runtime::make_draft_source(q.generate.speculative, *e.model, e.capacity);
  } catch (const Error& err) {
    return e.reject(r, err.what());
  }
  if (r->prompt.empty()) return e.reject(r, "the prompt is empty");
  for (size_t i = 0; i < r->prompt.size(); ++i)
    if (r->prompt[i] < 0 || r->prompt[i] >= tokenizer.n_vocab())
      return e.reject(r, fmt::format("prompt token {} (id {}) is outside the vocabulary [0, {})", i, r->prompt[i],
                                     tokenizer.n_vocab()));
  const GenerateOptions& g = q.generate;
  if (g.max_tokens < 0 || g.max_tokens > (1 << 24))
    return e.reject(r, fmt::format("GenerateOptions::max_tokens must be in [0, 2^24], got {}", g.max_tokens));
  for (int32_t t : g.stop_tokens)
    if (t < 0 || t >= tokenizer.n_vocab())
      return e.reject(r, fmt::format("stop token {} is outside the vocabulary [0, {})", t, tokenizer.n_vocab()));
  const auto prompt_len = int64_t(r->prompt.size());
  if (e.options.kv.eviction == KVEviction::none && prompt_len > e.capacity)
    return e.reject(r, fmt::format("the prompt has {} tokens; a request's context holds {}", prompt_len, e.capacity));
  const int64_t tokens = std::min<int64_t>(prompt_len + g.max_tokens, e.capacity);
  const int64_t pages = e.pages_for(tokens), pool_pages = e.cache.pool().stats().pages_total;
  if (pages > pool_pages)
    return e.reject(r, fmt::format("the request needs {} KV pages ({} tokens) and the whole pool has {}", pages, tokens,
                                   pool_pages));
  std::string refused;
  {
    std::lock_guard lock(e.mutex);
    if (e.shut_down) {
      refused = "the engine is shut down";
    } else if (int64_t(e.waiting.size()) >= e.options.max_waiting) {
      refused = fmt::format("the queue is full ({} requests wait)", e.options.max_waiting);
    } else {
      r->published.state = RequestState::waiting;
      r->published.prompt_tokens = int32_t(prompt_len);
      const auto at = std::upper_bound(e.waiting.begin(), e.waiting.end(), r,
                                       [](const auto& a, const auto& b) { return runs_before(*a, *b); });
      e.waiting.insert(at, r);
    }
  }
  if (!refused.empty()) return e.reject(r, refused);
  e.changed.notify_all();
  return r->handle;
}

bool Engine::cancel(RequestHandle handle) {
  Impl& e = *impl_;
  {
    std::lock_guard lock(e.mutex);
    auto it = e.requests.find(handle);
    if (it == e.requests.end() || it->second->ended || it->second->cancel_requested) return false;
    it->second->cancel_requested = true;
  }
  e.changed.notify_all();
  return true;
}

RequestResult Engine::result(RequestHandle handle) const {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->requests.find(handle);
  if (it == impl_->requests.end())
    fail(ErrorCode::invalid_argument, "unknown request handle {} (never submitted, or released)", handle);
  return it->second->published;
}

RequestResult Engine::wait(RequestHandle handle) const {
  std::unique_lock lock(impl_->mutex);
  auto it = impl_->requests.find(handle);
  if (it == impl_->requests.end())
    fail(ErrorCode::invalid_argument, "unknown request handle {} (never submitted, or released)", handle);
  const std::shared_ptr<EngineRequest> r = it->second;
  // Waits that nothing could ever end: from a callback of the step that would have to
  // end the request, or, while the engine has no thread of its own, from the thread
  // that drives step() (it is here instead of stepping).
  if (!r->ended) {
    const std::thread::id self = std::this_thread::get_id();
    if (impl_->stepping_thread.load() == self)
      fail(ErrorCode::invalid_argument, "Engine::wait() called from a request callback (request {} cannot end "
                                        "while its step waits)", handle);
    if (!impl_->runner.joinable() && impl_->host_stepper.load() == self)
      fail(ErrorCode::invalid_argument, "Engine::wait() on the thread that drives step() would never return: call "
                                        "step() until request {} ends, or start() the engine", handle);
  }
  impl_->changed.wait(lock, [&] { return r->ended; });
  return r->published;
}

bool Engine::release(RequestHandle handle) {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->requests.find(handle);
  if (it == impl_->requests.end() || !it->second->ended) return false;
  impl_->requests.erase(it);
  return true;
}

int32_t Engine::pending() const {
  std::lock_guard lock(impl_->mutex);
  return int32_t(impl_->waiting.size() + impl_->running.size());
}

int32_t Engine::step() {
  Impl& e = *impl_;
  if (e.stepping_thread.load() == std::this_thread::get_id())
    fail(ErrorCode::invalid_argument, "Engine::step() called from a request callback");
  {
    std::lock_guard lock(e.mutex);
    if (e.runner.joinable() && std::this_thread::get_id() != e.runner.get_id())
      fail(ErrorCode::invalid_argument, "Engine::step() called while the engine runs its own thread (start())");
  }
  std::lock_guard step_lock(e.step_mutex);
  e.stepping_thread = std::this_thread::get_id();
  e.host_stepper = std::this_thread::get_id();
  try {
    const int32_t n = e.step_locked();
    e.stepping_thread = std::thread::id{};
    return n;
  } catch (...) {
    e.stepping_thread = std::thread::id{};
    throw;
  }
}

void Engine::Impl::run_loop() {
  for (;;) {
    {
      std::unique_lock lock(mutex);
      changed.wait(lock, [&] { return runner_stop || !waiting.empty() || !running.empty(); });
      if (runner_stop) return;
    }
    std::lock_guard step_lock(step_mutex);
    stepping_thread = std::this_thread::get_id();
    int32_t n = 0;
    try {
      n = step_locked();
    } catch (...) {
      // step_locked() ends the requests a failed pass touched; keep serving the others.
    }
    stepping_thread = std::thread::id{};
    if (n == 0) {
      // Nothing could run (every waiting request waits for pages): sleep until a change.
      std::unique_lock lock(mutex);
      changed.wait_for(lock, std::chrono::milliseconds(5), [&] { return runner_stop; });
    }
  }
}

void Engine::start() {
  Impl& e = *impl_;
  std::lock_guard lock(e.mutex);
  if (e.runner.joinable()) fail(ErrorCode::invalid_argument, "Engine::start(): the engine's thread already runs");
  e.runner_stop = false;
  e.runner = std::thread([&e] { e.run_loop(); });
}

void Engine::stop() {
  Impl& e = *impl_;
  std::thread runner;
  {
    std::lock_guard lock(e.mutex);
    if (!e.runner.joinable()) return;
    if (e.runner.get_id() == std::this_thread::get_id())
      fail(ErrorCode::invalid_argument, "Engine::stop() called from a request callback");
    e.runner_stop = true;
    runner = std::move(e.runner);
  }
  e.changed.notify_all();
  runner.join();
}

void Engine::shutdown() {
  Impl& e = *impl_;
  {
    std::lock_guard lock(e.mutex);
    e.shut_down = true;
    for (auto& [handle, r] : e.requests)
      if (!r->ended) r->cancel_requested = true;
  }
  e.changed.notify_all();
  // From a callback the running step ends them; otherwise end them now.
  if (e.stepping_thread.load() == std::this_thread::get_id()) return;
  std::lock_guard step_lock(e.step_mutex);
  e.stepping_thread = std::this_thread::get_id();
  try {
    e.step_locked();
  } catch (...) {
  }
  e.stepping_thread = std::thread::id{};
}

EngineMetrics Engine::metrics() const { return impl_->snapshot(); }

}  // namespace ember
