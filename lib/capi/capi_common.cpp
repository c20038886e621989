// C API: statuses, the last error, versions, the buffer protocol and conversions.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "capi/capi.hpp"
#include "common/fail.hpp"

namespace ember::capi {
namespace {
thread_local std::string last_error;
}  // namespace

void set_last_error(std::string_view message) { last_error.assign(message); }

void require_arg(const void* p, const char* what) {
  if (!p) fail(ErrorCode::invalid_argument, "{} must not be NULL", what);
}

namespace {
template <class T>
ember_status copy_items(std::span<const T> items, T* buffer, size_t capacity, size_t* needed, bool terminate) {
  if (needed) *needed = items.size();
  const size_t want = items.size() + (terminate ? 1 : 0);
  if (capacity < want) {
    if (capacity > 0 && !buffer) fail(ErrorCode::invalid_argument, "the output buffer is NULL with capacity {}", capacity);
    set_last_error(fmt::format("the output buffer holds {} items; {} are needed", capacity, want));
    return EMBER_ERR_BUFFER_TOO_SMALL;
  }
  require_arg(buffer, "the output buffer");
  std::copy(items.begin(), items.end(), buffer);
  if (terminate) buffer[items.size()] = T{};
  return EMBER_OK;
}
}  // namespace

ember_status copy_out(std::string_view text, char* buffer, size_t capacity, size_t* needed) {
  return copy_items(std::span<const char>(text.data(), text.size()), buffer, capacity, needed, true);
}

ember_status copy_out(std::span<const int32_t> ids, int32_t* buffer, size_t capacity, size_t* needed) {
  return copy_items(ids, buffer, capacity, needed, false);
}

ember_status copy_out(std::span<const std::byte> bytes, void* buffer, size_t capacity, size_t* needed) {
  return copy_items(bytes, static_cast<std::byte*>(buffer), capacity, needed, false);
}

SamplerOptions to_cpp(const ember_sampler_options& o) {
  SamplerOptions s;
  s.temperature = o.temperature;
  s.top_k = o.top_k;
  s.top_p = o.top_p;
  s.min_p = o.min_p;
  s.repetition_penalty = o.repetition_penalty;
  s.frequency_penalty = o.frequency_penalty;
  s.presence_penalty = o.presence_penalty;
  s.penalty_last_n = o.penalty_last_n;
  s.seed = o.seed;
  if (o.n_logit_bias > 0) require_arg(o.logit_bias, "ember_sampler_options.logit_bias");
  for (size_t i = 0; i < o.n_logit_bias; ++i) s.logit_bias.emplace_back(o.logit_bias[i].token, o.logit_bias[i].bias);
  if (o.n_banned_tokens > 0) require_arg(o.banned_tokens, "ember_sampler_options.banned_tokens");
  s.banned_tokens.assign(o.banned_tokens, o.banned_tokens + o.n_banned_tokens);
  return s;
}

// The value a C caller stored in an enum field, read as its underlying integer: a C
// program may store any int there, and loading a value outside the enumerators through
// the C++ enum type is undefined (and -fstrict-enums may drop the range check).
template <typename E>
int64_t enum_value(const E& field) {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &field, sizeof v);
  return int64_t(v);
}

KVCacheOptions to_cpp(const ember_kv_options& o) {
  KVCacheOptions k;
  k.max_tokens = o.max_tokens;
  const int64_t storage = enum_value(o.storage), eviction = enum_value(o.eviction);
  require(storage >= EMBER_KV_F16 && storage <= EMBER_KV_K8V4, "ember_kv_options.storage has an unknown value {}",
          storage);
  require(eviction >= EMBER_EVICT_NONE && eviction <= EMBER_EVICT_H2O,
          "ember_kv_options.eviction has an unknown value {}", eviction);
  static constexpr KVStorage kStorage[] = {KVStorage::f16, KVStorage::f32, KVStorage::int8, KVStorage::int4,
                                               KVStorage::int4o, KVStorage::k8v4};
  static constexpr KVEviction kEviction[] = {KVEviction::none, KVEviction::streaming, KVEviction::h2o};
  k.storage = kStorage[storage];
  k.eviction = kEviction[eviction];
  k.group_size = o.group_size;
  k.sinks = o.sinks;
  k.window = o.window;
  k.heavy = o.heavy;
  k.recent = o.recent;
  return k;
}

ember_kv_options default_kv() {
  const KVCacheOptions k;
  return ember_kv_options{k.max_tokens, EMBER_KV_F16, k.group_size, EMBER_EVICT_NONE, k.sinks, k.window, k.heavy,
                          k.recent};
}

GenerateOptions to_cpp(const ember_generate_options& o) {
  GenerateOptions g;
  g.max_tokens = o.max_tokens;
  if (o.n_stop_strings > 0) require_arg(o.stop_strings, "ember_generate_options.stop_strings");
  for (size_t i = 0; i < o.n_stop_strings; ++i) {
    require(o.stop_strings[i] != nullptr, "ember_generate_options.stop_strings[{}] is NULL", i);
    g.stop_strings.emplace_back(o.stop_strings[i]);
  }
  if (o.n_stop_tokens > 0) require_arg(o.stop_tokens, "ember_generate_options.stop_tokens");
  g.stop_tokens.assign(o.stop_tokens, o.stop_tokens + o.n_stop_tokens);
  g.stop_at_end_of_generation = o.stop_at_end_of_generation != 0;
  g.add_bos = o.add_bos != 0;
  g.parse_special = o.parse_special != 0;
  g.logprobs = o.logprobs != 0;
  const int64_t draft_kind = enum_value(o.draft_kind);
  require(draft_kind >= EMBER_DRAFT_NONE && draft_kind <= EMBER_DRAFT_SELF,
          "ember_generate_options.draft_kind has an unknown value {}", draft_kind);
  static constexpr DraftKind kKinds[] = {DraftKind::none, DraftKind::model, DraftKind::lookup, DraftKind::self};
  SpeculativeOptions& s = g.speculative;
  s.kind = kKinds[draft_kind];
  if (o.draft_model) s.draft_model = o.draft_model->model;
  s.draft_max = o.draft_max;
  s.draft_min = o.draft_min;
  s.draft_p_min = o.draft_p_min;
  s.adaptive = o.draft_adaptive != 0;
  if (o.n_self_layers > 0) require_arg(o.self_layers, "ember_generate_options.self_layers");
  s.self_layers.assign(o.self_layers, o.self_layers + o.n_self_layers);
  s.self_vocab = o.self_vocab;
  s.self_lowbit = o.self_lowbit != 0;
  return g;
}

std::vector<ChatMessage> to_cpp(const ember_chat_message* messages, size_t n) {
  if (n > 0) require_arg(messages, "messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < n; ++i) {
    require(messages[i].role && messages[i].content, "messages[{}] has a NULL role or content", i);
    out.push_back({messages[i].role, messages[i].content});
  }
  return out;
}

ember_stop_reason to_c(StopReason reason) {
  switch (reason) {
    case StopReason::max_tokens: return EMBER_STOP_MAX_TOKENS;
    case StopReason::end_of_generation: return EMBER_STOP_END_OF_GENERATION;
    case StopReason::stop_token: return EMBER_STOP_TOKEN;
    case StopReason::stop_string: return EMBER_STOP_STRING;
    case StopReason::callback: return EMBER_STOP_CALLBACK;
    case StopReason::cancelled: return EMBER_STOP_CANCELLED;
    case StopReason::context_full: return EMBER_STOP_CONTEXT_FULL;
  }
  return EMBER_STOP_MAX_TOKENS;
}

Session::TokenEventCallback token_callback(ember_token_fn fn, void* user) {
  if (!fn) return {};
  return [fn, user](const TokenEvent& e) {
    return fn(e.token, e.text.data(), e.text.size(), e.logprob, user) == EMBER_CONTINUE ? Control::proceed
                                                                                         : Control::stop;
  };
}

}  // namespace ember::capi

using namespace ember;

extern "C" {

const char* ember_status_name(ember_status status) {
  switch (status) {
    case EMBER_OK: return "ok";
    case EMBER_ERR_INVALID_ARGUMENT: return "invalid_argument";
    case EMBER_ERR_IO: return "io";
    case EMBER_ERR_MALFORMED_FILE: return "malformed_file";
    case EMBER_ERR_UNSUPPORTED: return "unsupported";
    case EMBER_ERR_OUT_OF_MEMORY: return "out_of_memory";
    case EMBER_ERR_CACHE_FULL: return "cache_full";
    case EMBER_ERR_BACKEND: return "backend";
    case EMBER_ERR_INTERNAL: return "internal";
    case EMBER_ERR_BUFFER_TOO_SMALL: return "buffer_too_small";
    case EMBER_CANCELLED: return "cancelled";
  }
  return "unknown";
}

const char* ember_last_error(void) { return capi::last_error.c_str(); }
const char* ember_version(void) { return version_string(); }
int32_t ember_c_api_version(void) { return EMBER_C_API_VERSION; }

}  // extern "C"
