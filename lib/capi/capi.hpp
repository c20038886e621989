// The inside of the C API (include/ember/ember.h): the handle structs, the guard
// that turns every C++ exception into a status and a thread-local message, and the
// helpers that read versioned option structs and write caller buffers.
#pragma once

#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ember/ember.h"
#include "ember/ember.hpp"

struct ember_model {
  std::shared_ptr<ember::Model> model;
};

struct ember_sampler {
  ember::Sampler sampler;
};

struct ember_session {
  std::unique_ptr<ember::Session> session;
  // The last generate()'s output, handed out through ember_generate_result.
  std::string text;
  std::vector<int32_t> tokens;
};

struct ember_engine {
  std::unique_ptr<ember::Engine> engine;
};

namespace ember::capi {

// Stores the message for ember_last_error() on this thread.
void set_last_error(std::string_view message);

// Runs `body` (which returns an ember_status), turning every exception into a status
// and a last-error message. Clears the last error first.
template <class Body>
ember_status guard(Body&& body) noexcept {
  try {
    set_last_error({});
    return body();
  } catch (const Error& e) {
    set_last_error(e.what());
    switch (e.code()) {
      case ErrorCode::invalid_argument: return EMBER_ERR_INVALID_ARGUMENT;
      case ErrorCode::io: return EMBER_ERR_IO;
      case ErrorCode::malformed_file: return EMBER_ERR_MALFORMED_FILE;
      case ErrorCode::unsupported: return EMBER_ERR_UNSUPPORTED;
      case ErrorCode::out_of_memory: return EMBER_ERR_OUT_OF_MEMORY;
      case ErrorCode::cache_full: return EMBER_ERR_CACHE_FULL;
      case ErrorCode::backend: return EMBER_ERR_BACKEND;
      case ErrorCode::internal: return EMBER_ERR_INTERNAL;
    }
    return EMBER_ERR_INTERNAL;
  } catch (const std::bad_alloc&) {
    set_last_error("out of memory");
    return EMBER_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return EMBER_ERR_INTERNAL;
  } catch (...) {
    set_last_error("an unknown exception (from a host callback?)");
    return EMBER_ERR_INTERNAL;
  }
}

// Fails with invalid_argument naming `what` when `p` is null.
void require_arg(const void* p, const char* what);

// Reads an options struct of the caller's version: the fields its struct_size covers
// come from `in`, the rest keep `defaults`. `in` may be null (all defaults).
template <class T>
T read_versioned(const T* in, T defaults, const char* what) {
  if (!in) return defaults;
  if (in->struct_size < sizeof(size_t))
    throw Error(ErrorCode::invalid_argument, std::string(what) + ".struct_size is " +
                                                 std::to_string(in->struct_size) +
                                                 "; set it to sizeof the struct (use the *_default_options function)");
  std::memcpy(static_cast<void*>(&defaults), in, std::min(in->struct_size, sizeof(T)));
  defaults.struct_size = sizeof(T);
  return defaults;
}

// ember_*_init: the defaults into the caller's struct, as far as its size goes.
template <class T>
void init_versioned(T* out, size_t size, T defaults) {
  if (!out || size < sizeof(size_t)) return;
  defaults.struct_size = size;
  std::memcpy(static_cast<void*>(out), &defaults, std::min(size, sizeof(T)));
}

// Writes a filled result struct into the caller's, as far as its struct_size goes.
template <class T>
void write_versioned(T* out, T value, const char* what) {
  require_arg(out, what);
  if (out->struct_size < sizeof(size_t))
    throw Error(ErrorCode::invalid_argument, std::string(what) + ".struct_size is " +
                                                 std::to_string(out->struct_size) + "; set it to sizeof the struct");
  const size_t n = std::min(out->struct_size, sizeof(T));
  value.struct_size = out->struct_size;
  std::memcpy(static_cast<void*>(out), &value, n);
}

// The buffer protocol: stores the full size in *needed, copies when it fits.
ember_status copy_out(std::string_view text, char* buffer, size_t capacity, size_t* needed);
ember_status copy_out(std::span<const int32_t> ids, int32_t* buffer, size_t capacity, size_t* needed);
ember_status copy_out(std::span<const std::byte> bytes, void* buffer, size_t capacity, size_t* needed);

// Conversions of the C option structs (already read with read_versioned).
SamplerOptions to_cpp(const ember_sampler_options& o);
KVCacheOptions to_cpp(const ember_kv_options& o);
GenerateOptions to_cpp(const ember_generate_options& o);
std::vector<ChatMessage> to_cpp(const ember_chat_message* messages, size_t n);
ember_kv_options default_kv();
ember_stop_reason to_c(StopReason reason);

// A C token callback as a C++ one.
Session::TokenEventCallback token_callback(ember_token_fn fn, void* user);

}  // namespace ember::capi
