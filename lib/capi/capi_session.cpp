// C API: samplers and sessions.
#include "capi/capi.hpp"
#include "common/fail.hpp"

using namespace ember;
using capi::guard;
using capi::require_arg;

namespace {

ember_status to_status(Outcome outcome) {
  switch (outcome) {
    case Outcome::ok: return EMBER_OK;
    case Outcome::cancelled:
      capi::set_last_error("cancelled");
      return EMBER_CANCELLED;
    case Outcome::cache_full:
      capi::set_last_error("the tokens do not fit the context or the KV pool; nothing was added");
      return EMBER_ERR_CACHE_FULL;
  }
  return EMBER_ERR_INTERNAL;
}

ember_session* wrap(std::unique_ptr<Session> session) { return new ember_session{std::move(session), {}, {}}; }

}  // namespace

extern "C" {

// ---- samplers ----

void ember_sampler_options_init(ember_sampler_options* out, size_t size) {
  const SamplerOptions d;
  ember_sampler_options o{};
  o.struct_size = sizeof(o);
  o.temperature = d.temperature;
  o.top_k = d.top_k;
  o.top_p = d.top_p;
  o.min_p = d.min_p;
  o.repetition_penalty = d.repetition_penalty;
  o.frequency_penalty = d.frequency_penalty;
  o.presence_penalty = d.presence_penalty;
  o.penalty_last_n = d.penalty_last_n;
  o.seed = d.seed;
  capi::init_versioned(out, size, o);
}

ember_status ember_sampler_create(const ember_sampler_options* options, ember_sampler** out) {
  return guard([&] {
    require_arg(out, "out");
    const auto o = capi::read_versioned(options, ember_sampler_default_options(), "ember_sampler_options");
    *out = new ember_sampler{Sampler(capi::to_cpp(o))};
    return EMBER_OK;
  });
}

void ember_sampler_free(ember_sampler* sampler) { delete sampler; }

ember_status ember_sampler_sample(ember_sampler* sampler, const float* logits, size_t n_logits, int32_t* token) {
  return guard([&] {
    require_arg(sampler, "sampler");
    require_arg(token, "token");
    if (n_logits > 0) require_arg(logits, "logits");
    *token = sampler->sampler.sample(std::span(logits, n_logits));
    return EMBER_OK;
  });
}

ember_status ember_sampler_accept(ember_sampler* sampler, int32_t token) {
  return guard([&] {
    require_arg(sampler, "sampler");
    sampler->sampler.accept(token);
    return EMBER_OK;
  });
}

void ember_sampler_reset(ember_sampler* sampler) {
  if (sampler) sampler->sampler.reset();
}

// ---- sessions ----

void ember_session_options_init(ember_session_options* out, size_t size) {
  ember_session_options o{};
  o.struct_size = sizeof(o);
  o.kv = capi::default_kv();
  o.prefill_chunk_size = SessionOptions{}.prefill_chunk_size;
  capi::init_versioned(out, size, o);
}

ember_status ember_session_create(const ember_model* model, const ember_session_options* options,
                                  ember_session** out) {
  return guard([&] {
    require_arg(model, "model");
    require_arg(out, "out");
    const auto o = capi::read_versioned(options, ember_session_default_options(), "ember_session_options");
    SessionOptions s;
    s.kv = capi::to_cpp(o.kv);
    s.prefill_chunk_size = o.prefill_chunk_size;
    s.kv.exact_recent = o.kv_exact_recent;
    *out = wrap(model->model->new_session(s));
    return EMBER_OK;
  });
}

void ember_session_free(ember_session* session) { delete session; }

ember_status ember_session_prefill(ember_session* session, const int32_t* tokens, size_t n_tokens) {
  return guard([&] {
    require_arg(session, "session");
    if (n_tokens > 0) require_arg(tokens, "tokens");
    return to_status(session->session->prefill(std::span(tokens, n_tokens)));
  });
}

ember_status ember_session_prefill_text(ember_session* session, const char* text, size_t length, int32_t add_bos,
                                        int32_t parse_special) {
  return guard([&] {
    require_arg(session, "session");
    if (length > 0) require_arg(text, "text");
    return to_status(
        session->session->prefill(std::string_view(text ? text : "", length), add_bos != 0, parse_special != 0));
  });
}

ember_status ember_session_decode(ember_session* session, int32_t token) {
  return guard([&] {
    require_arg(session, "session");
    return to_status(session->session->decode(token));
  });
}

ember_status ember_session_logits(const ember_session* session, const float** logits, size_t* n) {
  return guard([&] {
    require_arg(session, "session");
    require_arg(logits, "logits");
    require_arg(n, "n");
    const auto row = session->session->logits();
    *logits = row.data();
    *n = row.size();
    return EMBER_OK;
  });
}

void ember_generate_options_init(ember_generate_options* out, size_t size) {
  const GenerateOptions d;
  ember_generate_options o{};
  o.struct_size = sizeof(o);
  o.max_tokens = d.max_tokens;
  o.stop_at_end_of_generation = d.stop_at_end_of_generation;
  o.add_bos = d.add_bos;
  o.parse_special = d.parse_special;
  o.logprobs = d.logprobs;
  o.draft_kind = EMBER_DRAFT_NONE;
  o.draft_max = d.speculative.draft_max;
  o.draft_min = d.speculative.draft_min;
  o.draft_p_min = d.speculative.draft_p_min;
  o.draft_adaptive = d.speculative.adaptive;
  capi::init_versioned(out, size, o);
}

ember_status ember_session_generate(ember_session* session, const char* prompt, ember_sampler* sampler,
                                    const ember_generate_options* options, ember_token_fn callback, void* user,
                                    ember_generate_result* result) {
  return guard([&] {
    require_arg(session, "session");
    require_arg(sampler, "sampler");
    const auto o = capi::read_versioned(options, ember_generate_default_options(), "ember_generate_options");
    GenerateResult r = session->session->generate(std::string_view(prompt ? prompt : ""), sampler->sampler,
                                                  capi::to_cpp(o), capi::token_callback(callback, user));
    session->text = std::move(r.text);
    session->tokens = std::move(r.tokens);
    if (result) {
      ember_generate_result out{};
      out.stop_reason = capi::to_c(r.stop_reason);
      out.text = session->text.c_str();
      out.text_length = session->text.size();
      out.tokens = session->tokens.data();
      out.n_tokens = session->tokens.size();
      out.prompt_tokens = r.metrics.prompt_tokens;
      out.prefill_seconds = r.metrics.prefill_seconds;
      out.decode_seconds = r.metrics.decode_seconds;
      out.time_to_first_token = r.metrics.time_to_first_token;
      out.drafted = r.speculative.drafted;
      out.accepted = r.speculative.accepted;
      capi::write_versioned(result, out, "ember_generate_result");
    }
    return EMBER_OK;
  });
}

void ember_session_cancel(ember_session* session) {
  if (session) session->session->cancel();
}

ember_status ember_session_rewind(ember_session* session, int32_t n_tokens) {
  return guard([&] {
    require_arg(session, "session");
    session->session->rewind(n_tokens);
    return EMBER_OK;
  });
}

void ember_session_reset(ember_session* session) {
  if (session) session->session->reset();
}

int32_t ember_session_position(const ember_session* session) { return session ? session->session->position() : 0; }

ember_status ember_session_fork(const ember_session* session, ember_session** out) {
  return guard([&] {
    require_arg(session, "session");
    require_arg(out, "out");
    *out = wrap(session->session->fork());
    return EMBER_OK;
  });
}

ember_status ember_session_save_state(const ember_session* session, void* data, size_t capacity, size_t* needed) {
  return guard([&] {
    require_arg(session, "session");
    const std::string blob = session->session->save_state();
    return capi::copy_out(std::as_bytes(std::span(blob.data(), blob.size())), data, capacity, needed);
  });
}

ember_status ember_session_load_state(ember_session* session, const void* data, size_t size) {
  return guard([&] {
    require_arg(session, "session");
    if (size > 0) require_arg(data, "data");
    session->session->load_state(std::string_view(static_cast<const char*>(data), size));
    return EMBER_OK;
  });
}

}  // extern "C"
