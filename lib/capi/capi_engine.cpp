// C API: the Engine (continuous batching).
#include "capi/capi.hpp"
#include "common/fail.hpp"

using namespace ember;
using capi::guard;
using capi::require_arg;

namespace {

ember_request_state to_c(RequestState state) {
  switch (state) {
    case RequestState::waiting: return EMBER_REQUEST_WAITING;
    case RequestState::running: return EMBER_REQUEST_RUNNING;
    case RequestState::finished: return EMBER_REQUEST_FINISHED;
    case RequestState::rejected: return EMBER_REQUEST_REJECTED;
  }
  return EMBER_REQUEST_REJECTED;
}

Request to_cpp(const ember_request& r) {
  Request q;
  if (r.prompt) q.prompt = r.prompt;
  if (r.n_prompt_tokens > 0) require_arg(r.prompt_tokens, "ember_request.prompt_tokens");
  q.prompt_tokens.assign(r.prompt_tokens, r.prompt_tokens + r.n_prompt_tokens);
  q.messages = capi::to_cpp(r.messages, r.n_messages);
  q.sampler = capi::to_cpp(capi::read_versioned(r.sampler, ember_sampler_default_options(), "ember_request.sampler"));
  const auto g = capi::read_versioned(r.generate, ember_generate_default_options(), "ember_request.generate");
  q.generate = capi::to_cpp(g);
  q.logprobs = g.logprobs != 0;
  q.priority = r.priority;
  if (r.on_token) {
    auto fn = capi::token_callback(r.on_token, r.user);
    q.on_token = [fn = std::move(fn)](const TokenEvent& e) { return fn(e); };
  }
  return q;
}

}  // namespace

extern "C" {

void ember_engine_options_init(ember_engine_options* out, size_t size) {
  const EngineOptions d;
  ember_engine_options o{};
  o.struct_size = sizeof(o);
  o.max_batch_size = d.max_batch_size;
  o.max_batch_tokens = d.max_batch_tokens;
  o.prefill_chunk_size = d.prefill_chunk_size;
  o.max_waiting = d.max_waiting;
  o.kv = capi::default_kv();
  o.prefix_sharing = d.prefix_sharing;
  o.batch_invariant = d.batch_invariant;
  o.slo_ttft_seconds = d.slo_ttft_seconds;
  o.slo_tpot_seconds = d.slo_tpot_seconds;
  o.price_per_hour = d.price_per_hour;
  capi::init_versioned(out, size, o);
}

void ember_request_init(ember_request* out, size_t size) {
  ember_request r{};
  r.struct_size = sizeof(r);
  capi::init_versioned(out, size, r);
}

ember_status ember_engine_create(const ember_model* model, const ember_engine_options* options, ember_engine** out) {
  return guard([&] {
    require_arg(model, "model");
    require_arg(out, "out");
    const auto o = capi::read_versioned(options, ember_engine_default_options(), "ember_engine_options");
    EngineOptions e;
    e.max_batch_size = o.max_batch_size;
    e.max_batch_tokens = o.max_batch_tokens;
    e.prefill_chunk_size = o.prefill_chunk_size;
    e.max_waiting = o.max_waiting;
    e.kv = capi::to_cpp(o.kv);
    e.prefix_sharing = o.prefix_sharing != 0;
    e.batch_invariant = o.batch_invariant != 0;
    e.slo_ttft_seconds = o.slo_ttft_seconds;
    e.slo_tpot_seconds = o.slo_tpot_seconds;
    e.price_per_hour = o.price_per_hour;
    e.kv.exact_recent = o.kv_exact_recent;
    *out = new ember_engine{Engine::create(model->model, e)};
    return EMBER_OK;
  });
}

void ember_engine_free(ember_engine* engine) {
  if (!engine) return;
  // The destructor shuts down and joins; a throwing host callback must not escape.
  guard([&] {
    engine->engine.reset();
    return EMBER_OK;
  });
  delete engine;
}

ember_status ember_engine_submit(ember_engine* engine, const ember_request* request, ember_request_handle* handle) {
  return guard([&] {
    require_arg(engine, "engine");
    require_arg(handle, "handle");
    require_arg(request, "request");
    const ember_request r = capi::read_versioned(request, ember_request_default(), "ember_request");
    *handle = engine->engine->submit(to_cpp(r));
    return EMBER_OK;
  });
}

int32_t ember_engine_cancel(ember_engine* engine, ember_request_handle handle) {
  return engine && engine->engine->cancel(handle) ? 1 : 0;
}

ember_status ember_engine_step(ember_engine* engine, int32_t* n_tokens) {
  return guard([&] {
    require_arg(engine, "engine");
    const int32_t n = engine->engine->step();
    if (n_tokens) *n_tokens = n;
    return EMBER_OK;
  });
}

ember_status ember_engine_start(ember_engine* engine) {
  return guard([&] {
    require_arg(engine, "engine");
    engine->engine->start();
    return EMBER_OK;
  });
}

void ember_engine_stop(ember_engine* engine) {
  if (engine) guard([&] {
      engine->engine->stop();
      return EMBER_OK;
    });
}

void ember_engine_shutdown(ember_engine* engine) {
  if (engine) guard([&] {
      engine->engine->shutdown();
      return EMBER_OK;
    });
}

int32_t ember_engine_pending(const ember_engine* engine) { return engine ? engine->engine->pending() : 0; }

ember_status ember_engine_result(ember_engine* engine, ember_request_handle handle, int32_t wait,
                                 ember_request_result* result) {
  return guard([&] {
    require_arg(engine, "engine");
    const RequestResult r = wait ? engine->engine->wait(handle) : engine->engine->result(handle);
    ember_request_result out{};
    out.state = to_c(r.state);
    out.stop_reason = capi::to_c(r.stop_reason);
    out.n_generated = int32_t(r.tokens.size());
    out.prompt_tokens = r.prompt_tokens;
    out.cached_prompt_tokens = r.cached_prompt_tokens;
    out.preemptions = r.preemptions;
    out.queue_seconds = r.queue_seconds;
    out.time_to_first_token = r.time_to_first_token;
    out.time_per_output_token = r.time_per_output_token;
    out.total_seconds = r.total_seconds;
    capi::write_versioned(result, out, "ember_request_result");
    return EMBER_OK;
  });
}

ember_status ember_engine_text(ember_engine* engine, ember_request_handle handle, char* text, size_t capacity,
                               size_t* needed) {
  return guard([&] {
    require_arg(engine, "engine");
    return capi::copy_out(engine->engine->result(handle).text, text, capacity, needed);
  });
}

ember_status ember_engine_error(ember_engine* engine, ember_request_handle handle, char* text, size_t capacity,
                                size_t* needed) {
  return guard([&] {
    require_arg(engine, "engine");
    return capi::copy_out(engine->engine->result(handle).error, text, capacity, needed);
  });
}

int32_t ember_engine_release(ember_engine* engine, ember_request_handle handle) {
  return engine && engine->engine->release(handle) ? 1 : 0;
}

ember_status ember_engine_metrics(const ember_engine* engine, int32_t format, char* text, size_t capacity,
                                  size_t* needed) {
  return guard([&] {
    require_arg(engine, "engine");
    require(format == 0 || format == 1, "format must be 0 (Prometheus) or 1 (JSON), got {}", format);
    const std::string s = format == 0 ? engine->engine->metrics_prometheus() : engine->engine->metrics_json();
    return capi::copy_out(s, text, capacity, needed);
  });
}

}  // extern "C"
