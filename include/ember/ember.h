/* ember's C API: a C99 interface over the C++ library, for game engines, other
 * languages (C#, Rust, Python, Lua) and hosts that cannot use C++.
 *
 * Conventions (docs/api.md shows C and C++ side by side):
 *   - Objects are opaque handles made by ember_*_create / ember_model_load* and
 *     freed by the matching ember_*_free (which accepts NULL). A handle must
 *     outlive nothing it made: free sessions and engines before their model.
 *   - Every function that can fail returns an ember_status. On failure the
 *     thread's last error message (ember_last_error) names the cause and the
 *     object is left as it was before the call. No C++ exception crosses this API.
 *   - Options structs start with struct_size. Get them from
 *     ember_*_default_options() (inline: it calls ember_*_init with the size this
 *     header knows) and change the fields you need: a program built against an
 *     older ember.h passes a smaller struct_size, ember writes and reads only that
 *     many bytes and uses its defaults for the fields it did not know. Nothing is
 *     returned by value across the library boundary.
 *   - Strings in are UTF-8 with an explicit length (or NUL-terminated where the
 *     parameter says so). Strings and arrays out are written into caller buffers:
 *     the call stores the full size in *needed (for strings, without the NUL) and
 *     returns EMBER_ERR_BUFFER_TOO_SMALL when `capacity` cannot hold it (plus the
 *     NUL for strings); call again with a larger buffer.
 *   - Thread safety: a model may be used from any number of threads. A session
 *     or sampler belongs to one thread at a time, except ember_session_cancel,
 *     which may come from any thread. Engine calls are safe from any thread,
 *     except ember_engine_step, which one thread drives.
 */
#ifndef EMBER_EMBER_H
#define EMBER_EMBER_H

#include <stddef.h>
#include <stdint.h>

#include "ember/export.hpp"

#ifdef __cplusplus
extern "C" {
#endif

/* Defines ember_*_default_options() in the caller, over the library's init function:
 * the caller's own sizeof goes in, nothing comes back by value across the boundary. */
#define EMBER_DEFAULTS(type, name, init) \
  static inline type name(void) {       \
    type o;                             \
    init(&o, sizeof o);                 \
    return o;                           \
  }

/* The version of this C interface: raised when functions or fields are added. */
#define EMBER_C_API_VERSION 2

typedef enum ember_status {
  EMBER_OK = 0,
  EMBER_ERR_INVALID_ARGUMENT = 1, /* a parameter is out of range or inconsistent */
  EMBER_ERR_IO = 2,               /* a file could not be opened, read or mapped */
  EMBER_ERR_MALFORMED_FILE = 3,   /* a GGUF file violates its format */
  EMBER_ERR_UNSUPPORTED = 4,      /* a valid input ember does not handle */
  EMBER_ERR_OUT_OF_MEMORY = 5,
  EMBER_ERR_CACHE_FULL = 6,       /* the KV cache has no room for the tokens; nothing was added */
  EMBER_ERR_BACKEND = 7,          /* a device or driver error */
  EMBER_ERR_INTERNAL = 8,         /* a broken invariant inside ember: please report it */
  EMBER_ERR_BUFFER_TOO_SMALL = 9, /* an output buffer is too small; *needed tells the size */
  EMBER_CANCELLED = 10            /* cancel stopped the call (not an error: the work done stays) */
} ember_status;

/* Short stable name of a status ("ok", "invalid_argument", ...). Never NULL. */
EMBER_API const char* ember_status_name(ember_status status);
/* The message of the last failed call on this thread ("" when none). Valid until the
 * next ember call on this thread. */
EMBER_API const char* ember_last_error(void);
/* ember's version ("1.1.0") and the C interface version of the library loaded. */
EMBER_API const char* ember_version(void);
EMBER_API int32_t ember_c_api_version(void);

/* ---- logging and progress ------------------------------------------------------ */

typedef enum ember_log_level { EMBER_LOG_DEBUG = 0, EMBER_LOG_INFO = 1, EMBER_LOG_WARNING = 2, EMBER_LOG_ERROR = 3 } ember_log_level;
/* Receives a log message (not NUL-terminated: use `length`). May run on any thread
 * that calls into the model; must not call back into the same object. */
typedef void (*ember_log_fn)(ember_log_level level, const char* message, size_t length, void* user);
/* Loading progress in [0, 1]; return 0 to cancel the load. */
typedef int (*ember_progress_fn)(float fraction, void* user);

/* ---- models ---------------------------------------------------------------------- */

typedef struct ember_model ember_model;

typedef enum ember_kv_storage { EMBER_KV_F16 = 0, EMBER_KV_F32 = 1, EMBER_KV_INT8 = 2, EMBER_KV_INT4 = 3, EMBER_KV_INT4O = 4, EMBER_KV_K8V4 = 5 } ember_kv_storage;
typedef enum ember_kv_eviction { EMBER_EVICT_NONE = 0, EMBER_EVICT_STREAMING = 1, EMBER_EVICT_H2O = 2 } ember_kv_eviction;

typedef struct ember_model_options {
  size_t struct_size;        /* sizeof(ember_model_options) */
  int32_t threads;           /* thread pool size; 0 = physical cores (default) */
  int32_t use_mmap;          /* map the file (default 1) */
  int32_t vocab_only;        /* tokenizer only, no weights (default 0) */
  int32_t kv_page_tokens;    /* tokens per KV page (default 16) */
  int64_t kv_pool_tokens;    /* tokens per KV pool; 0 = default */
  uint64_t kv_memory_budget; /* most bytes all KV pools reserve; 0 = no budget */
  ember_log_fn log;          /* default NULL: silent */
  void* log_user;
  ember_progress_fn progress; /* default NULL */
  void* progress_user;
} ember_model_options;

/* Fills the first `struct_size` bytes of *options with the defaults (the fields a
 * caller built against this or an older header knows) and sets its struct_size. */
EMBER_API void ember_model_options_init(ember_model_options* options, size_t struct_size);
EMBER_DEFAULTS(ember_model_options, ember_model_default_options, ember_model_options_init)

/* Loads a GGUF file (path NUL-terminated). options may be NULL for the defaults. */
EMBER_API ember_status ember_model_load(const char* path, const ember_model_options* options, ember_model** out);
/* Loads a GGUF image in memory. copy = 0: ember reads it in place and the caller keeps
 * it alive and unchanged until the model and everything made from it are freed;
 * copy = 1: ember copies it before returning. */
EMBER_API ember_status ember_model_load_from_memory(const void* data, size_t size, int32_t copy,
                                                    const ember_model_options* options, ember_model** out);
/* Loads through the host's reader: read(user, offset, dst, n) fills dst with n bytes
 * at offset and returns 1, or 0 on failure. Called only inside this call. */
typedef int (*ember_read_fn)(void* user, uint64_t offset, void* dst, size_t n);
EMBER_API ember_status ember_model_load_from_reader(uint64_t size, ember_read_fn read, void* user,
                                                    const ember_model_options* options, ember_model** out);
EMBER_API void ember_model_free(ember_model* model);

typedef struct ember_model_info {
  size_t struct_size;       /* set by the caller: sizeof(ember_model_info) */
  const char* architecture; /* NUL-terminated, owned by the model */
  const char* name;
  const char* chat_template; /* "gemma", "chatml", "llama3" or "" */
  int64_t n_vocab;
  int64_t n_ctx_train;
  int64_t n_embd;
  int32_t n_layer;
  int32_t n_head;
  int32_t n_head_kv;
  int32_t head_dim;
  int32_t threads;           /* threads of the model's pool */
  int32_t bos_token;         /* -1 when none */
  int32_t eos_token;
  uint64_t weight_bytes;
  uint64_t kv_bytes_per_token; /* F16 storage */
  uint64_t kv_reserved_bytes;  /* address space the KV pools reserve now */
  uint64_t kv_used_bytes;      /* bytes in pages held by sessions */
} ember_model_info;

EMBER_API ember_status ember_model_get_info(const ember_model* model, ember_model_info* info);

/* Text to token ids into tokens[capacity]; *needed = the count. */
EMBER_API ember_status ember_tokenize(const ember_model* model, const char* text, size_t length, int32_t add_bos,
                                      int32_t parse_special, int32_t* tokens, size_t capacity, size_t* needed);
/* Token ids to text into text[capacity] (NUL-terminated); *needed = the length. */
EMBER_API ember_status ember_detokenize(const ember_model* model, const int32_t* tokens, size_t n_tokens,
                                        int32_t render_special, char* text, size_t capacity, size_t* needed);
/* 1 for tokens that end a turn or the text. */
EMBER_API int32_t ember_is_end_of_generation(const ember_model* model, int32_t token);

typedef struct ember_chat_message {
  const char* role;    /* "system", "user" or "assistant", NUL-terminated */
  const char* content; /* NUL-terminated */
} ember_chat_message;
/* Renders a conversation with the model's chat format into text[capacity]. */
EMBER_API ember_status ember_chat_apply(const ember_model* model, const ember_chat_message* messages, size_t n_messages,
                                        int32_t add_generation_prompt, char* text, size_t capacity, size_t* needed);

/* ---- samplers ---------------------------------------------------------------------- */

typedef struct ember_sampler ember_sampler;
typedef struct ember_logit_bias {
  int32_t token;
  float bias;
} ember_logit_bias;

#define EMBER_RANDOM_SEED UINT64_MAX

typedef struct ember_sampler_options {
  size_t struct_size;
  float temperature;        /* 0 = greedy; default 0.8 */
  int32_t top_k;            /* default 40; 0 = off */
  float top_p;              /* default 0.95; 1 = off */
  float min_p;              /* default 0.05; 0 = off */
  float repetition_penalty; /* default 1 = off */
  float frequency_penalty;  /* default 0 */
  float presence_penalty;   /* default 0 */
  int32_t penalty_last_n;   /* default 64 */
  uint64_t seed;            /* default EMBER_RANDOM_SEED */
  const ember_logit_bias* logit_bias; /* copied at create; may be NULL */
  size_t n_logit_bias;
  const int32_t* banned_tokens;       /* copied at create; may be NULL */
  size_t n_banned_tokens;
} ember_sampler_options;

/* Fills the first `struct_size` bytes of *options with the defaults (the fields a
 * caller built against this or an older header knows) and sets its struct_size. */
EMBER_API void ember_sampler_options_init(ember_sampler_options* options, size_t struct_size);
EMBER_DEFAULTS(ember_sampler_options, ember_sampler_default_options, ember_sampler_options_init)
EMBER_API ember_status ember_sampler_create(const ember_sampler_options* options, ember_sampler** out);
EMBER_API void ember_sampler_free(ember_sampler* sampler);
/* Picks a token from logits[n_logits]. */
EMBER_API ember_status ember_sampler_sample(ember_sampler* sampler, const float* logits, size_t n_logits,
                                            int32_t* token);
/* Records a token of the sequence for the penalties. */
EMBER_API ember_status ember_sampler_accept(ember_sampler* sampler, int32_t token);
EMBER_API void ember_sampler_reset(ember_sampler* sampler);

/* ---- sessions ---------------------------------------------------------------------- */

typedef struct ember_session ember_session;

/* Frozen: embedded in other option structs, so it never grows (new KV settings are
 * added at the end of those structs instead). */
typedef struct ember_kv_options {
  int32_t max_tokens;  /* context length; default 4096 */
  ember_kv_storage storage;
  int32_t group_size;  /* int8/int4/int4o/k8v4: 32 or 64 */
  ember_kv_eviction eviction;
  int32_t sinks, window;  /* streaming */
  int32_t heavy, recent;  /* h2o */
} ember_kv_options;

typedef struct ember_session_options {
  size_t struct_size;
  ember_kv_options kv;
  int32_t prefill_chunk_size; /* default 512 */
  int32_t kv_exact_recent;    /* KVCacheOptions::exact_recent: newest tokens also kept in F16; default 0 */
} ember_session_options;

/* Fills the first `struct_size` bytes of *options with the defaults (the fields a
 * caller built against this or an older header knows) and sets its struct_size. */
EMBER_API void ember_session_options_init(ember_session_options* options, size_t struct_size);
EMBER_DEFAULTS(ember_session_options, ember_session_default_options, ember_session_options_init)
EMBER_API ember_status ember_session_create(const ember_model* model, const ember_session_options* options,
                                            ember_session** out);
EMBER_API void ember_session_free(ember_session* session);

/* Appends tokens (or text, tokenized with BOS when the session is empty and add_bos)
 * and evaluates them. EMBER_CANCELLED: the chunks done before the cancel stay;
 * EMBER_ERR_CACHE_FULL: nothing was added. */
EMBER_API ember_status ember_session_prefill(ember_session* session, const int32_t* tokens, size_t n_tokens);
EMBER_API ember_status ember_session_prefill_text(ember_session* session, const char* text, size_t length,
                                                  int32_t add_bos, int32_t parse_special);
EMBER_API ember_status ember_session_decode(ember_session* session, int32_t token);
/* The next-token logits [n_vocab], owned by the session and valid until its next call;
 * *n = 0 before any token. */
EMBER_API ember_status ember_session_logits(const ember_session* session, const float** logits, size_t* n);

/* Streaming callback: one generated token, the text released with it (may be empty)
 * and its log-probability (NaN unless ember_generate_options.logprobs). Return
 * EMBER_CONTINUE or EMBER_STOP. token is -1 for text released at the end. */
#define EMBER_CONTINUE 0
#define EMBER_STOP 1
typedef int (*ember_token_fn)(int32_t token, const char* text, size_t length, float logprob, void* user);

typedef enum ember_stop_reason {
  EMBER_STOP_MAX_TOKENS = 0,
  EMBER_STOP_END_OF_GENERATION = 1,
  EMBER_STOP_TOKEN = 2,
  EMBER_STOP_STRING = 3,
  EMBER_STOP_CALLBACK = 4,
  EMBER_STOP_CANCELLED = 5,
  EMBER_STOP_CONTEXT_FULL = 6
} ember_stop_reason;

typedef enum ember_draft_kind {
  EMBER_DRAFT_NONE = 0,
  EMBER_DRAFT_MODEL = 1,  /* a separate draft model */
  EMBER_DRAFT_LOOKUP = 2, /* prompt lookup */
  EMBER_DRAFT_SELF = 3    /* the model itself, made cheaper */
} ember_draft_kind;

typedef struct ember_generate_options {
  size_t struct_size;
  int32_t max_tokens;                 /* default 256 */
  const char* const* stop_strings;    /* NUL-terminated strings; may be NULL */
  size_t n_stop_strings;
  const int32_t* stop_tokens;         /* may be NULL */
  size_t n_stop_tokens;
  int32_t stop_at_end_of_generation;  /* default 1 */
  int32_t add_bos;                    /* default 1 */
  int32_t parse_special;              /* default 1 */
  int32_t logprobs;                   /* default 0 */
  /* Speculative decoding (lossless; docs/speculative.md): */
  ember_draft_kind draft_kind;        /* default EMBER_DRAFT_NONE */
  const ember_model* draft_model;     /* EMBER_DRAFT_MODEL: same vocabulary; must outlive the call */
  int32_t draft_max;                  /* drafted tokens per step, [1, 16]; default 4 */
  int32_t draft_min;                  /* default 1 */
  float draft_p_min;                  /* default 0 */
  int32_t draft_adaptive;             /* default 1 */
  const int32_t* self_layers;         /* EMBER_DRAFT_SELF: layers kept (NULL = all); copied */
  size_t n_self_layers;
  int32_t self_vocab;                 /* EMBER_DRAFT_SELF: tokens scored (0 = all) */
  int32_t self_lowbit;                /* EMBER_DRAFT_SELF: Q4_0 copy of the layer matrices */
} ember_generate_options;

/* Fills the first `struct_size` bytes of *options with the defaults (the fields a
 * caller built against this or an older header knows) and sets its struct_size. */
EMBER_API void ember_generate_options_init(ember_generate_options* options, size_t struct_size);
EMBER_DEFAULTS(ember_generate_options, ember_generate_default_options, ember_generate_options_init)

typedef struct ember_generate_result {
  size_t struct_size;      /* set by the caller: sizeof(ember_generate_result) */
  ember_stop_reason stop_reason;
  const char* text;        /* NUL-terminated; owned by the session, valid until its next generate or free */
  size_t text_length;
  const int32_t* tokens;   /* owned by the session like text */
  size_t n_tokens;
  int32_t prompt_tokens;
  double prefill_seconds;
  double decode_seconds;
  double time_to_first_token;
  int64_t drafted;         /* speculative tokens proposed */
  int64_t accepted;        /* of these, kept */
} ember_generate_result;

/* Prefills `prompt` (NUL-terminated; may be "" to continue) and samples up to
 * max_tokens tokens. callback and result may be NULL. */
EMBER_API ember_status ember_session_generate(ember_session* session, const char* prompt, ember_sampler* sampler,
                                              const ember_generate_options* options, ember_token_fn callback,
                                              void* user, ember_generate_result* result);
/* Asks a running call to stop; from any thread. Never lost: when no call runs, the
 * next one returns EMBER_CANCELLED at once. */
EMBER_API void ember_session_cancel(ember_session* session);
EMBER_API ember_status ember_session_rewind(ember_session* session, int32_t n_tokens);
EMBER_API void ember_session_reset(ember_session* session);
EMBER_API int32_t ember_session_position(const ember_session* session);
/* A new session sharing this one's context copy-on-write. */
EMBER_API ember_status ember_session_fork(const ember_session* session, ember_session** out);
/* The whole state as a blob into data[capacity]; *needed = its size. */
EMBER_API ember_status ember_session_save_state(const ember_session* session, void* data, size_t capacity,
                                                size_t* needed);
EMBER_API ember_status ember_session_load_state(ember_session* session, const void* data, size_t size);

/* ---- engine (continuous batching) ---------------------------------------------------- */

typedef struct ember_engine ember_engine;
typedef uint64_t ember_request_handle;

typedef struct ember_engine_options {
  size_t struct_size;
  int32_t max_batch_size;     /* default 16 */
  int32_t max_batch_tokens;   /* default 512 */
  int32_t prefill_chunk_size; /* default 256 */
  int32_t max_waiting;        /* default 4096 */
  ember_kv_options kv;
  int32_t prefix_sharing;     /* default 1 */
  int32_t batch_invariant;    /* default 1 */
  double slo_ttft_seconds, slo_tpot_seconds;
  double price_per_hour;
  int32_t kv_exact_recent;    /* KVCacheOptions::exact_recent; default 0 */
} ember_engine_options;

typedef enum ember_request_state {
  EMBER_REQUEST_WAITING = 0,
  EMBER_REQUEST_RUNNING = 1,
  EMBER_REQUEST_FINISHED = 2,
  EMBER_REQUEST_REJECTED = 3
} ember_request_state;

typedef struct ember_request {
  size_t struct_size;
  const char* prompt;                 /* NUL-terminated text, used when tokens and messages are empty */
  const int32_t* prompt_tokens;
  size_t n_prompt_tokens;
  const ember_chat_message* messages; /* rendered with the chat template */
  size_t n_messages;
  const ember_sampler_options* sampler;   /* NULL = defaults; read at submit */
  const ember_generate_options* generate; /* NULL = defaults; read at submit */
  int32_t priority;
  ember_token_fn on_token;            /* on the stepping thread; may be NULL */
  void* user;
} ember_request;

typedef struct ember_request_result {
  size_t struct_size;
  ember_request_state state;
  ember_stop_reason stop_reason;
  int32_t n_generated;
  int32_t prompt_tokens;
  int32_t cached_prompt_tokens;
  int32_t preemptions;
  double queue_seconds, time_to_first_token, time_per_output_token, total_seconds;
} ember_request_result;

/* Fills the first `struct_size` bytes of *options with the defaults (the fields a
 * caller built against this or an older header knows) and sets its struct_size. */
EMBER_API void ember_engine_options_init(ember_engine_options* options, size_t struct_size);
EMBER_DEFAULTS(ember_engine_options, ember_engine_default_options, ember_engine_options_init)
/* A request with every field at its default (no prompt yet). */
/* Fills the first `struct_size` bytes of *options with the defaults (the fields a
 * caller built against this or an older header knows) and sets its struct_size. */
EMBER_API void ember_request_init(ember_request* options, size_t struct_size);
EMBER_DEFAULTS(ember_request, ember_request_default, ember_request_init)
EMBER_API ember_status ember_engine_create(const ember_model* model, const ember_engine_options* options,
                                           ember_engine** out);
/* Shuts down (ending requests as cancelled), stops its thread, frees it. */
EMBER_API void ember_engine_free(ember_engine* engine);
/* Queues a request. A request that can never run is still given a handle: its
 * state is REJECTED and ember_engine_error tells why. */
EMBER_API ember_status ember_engine_submit(ember_engine* engine, const ember_request* request,
                                           ember_request_handle* handle);
/* 1 when the request was waiting or running, 0 for unknown or ended handles. */
EMBER_API int32_t ember_engine_cancel(ember_engine* engine, ember_request_handle handle);
/* Runs one step from the host's loop; *n_tokens = tokens evaluated (may be NULL). */
EMBER_API ember_status ember_engine_step(ember_engine* engine, int32_t* n_tokens);
EMBER_API ember_status ember_engine_start(ember_engine* engine);
EMBER_API void ember_engine_stop(ember_engine* engine);
EMBER_API void ember_engine_shutdown(ember_engine* engine);
EMBER_API int32_t ember_engine_pending(const ember_engine* engine);
/* The request's state so far (wait = 1: block until it has ended). */
EMBER_API ember_status ember_engine_result(ember_engine* engine, ember_request_handle handle, int32_t wait,
                                           ember_request_result* result);
/* The request's generated text so far into text[capacity]. */
EMBER_API ember_status ember_engine_text(ember_engine* engine, ember_request_handle handle, char* text,
                                         size_t capacity, size_t* needed);
/* Why a request was rejected ("" otherwise). */
EMBER_API ember_status ember_engine_error(ember_engine* engine, ember_request_handle handle, char* text,
                                          size_t capacity, size_t* needed);
EMBER_API int32_t ember_engine_release(ember_engine* engine, ember_request_handle handle);
/* Metrics as Prometheus text (format 0 = prometheus) or JSON (format 1). */
EMBER_API ember_status ember_engine_metrics(const ember_engine* engine, int32_t format, char* text, size_t capacity,
                                            size_t* needed);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_EMBER_H */
