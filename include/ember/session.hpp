// ember::Session: one sequence of tokens on a model.
//
// A session is a handle to one sequence on the model's executor: all sessions of
// a model share its thread pool (ModelOptions::threads) and its paged KV cache;
// each has its own tokens, budget and eviction policy. A session belongs to one
// thread at a time; cancel() is the one call that may come from another thread.
// Failures throw ember::Error and leave the session as it was before the call;
// expected outcomes (the cache is full, cancellation, a stop token, the callback
// asking to stop, max_tokens) are return values.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ember/export.hpp"
#include "ember/kv_cache.hpp"
#include "ember/model.hpp"
#include "ember/sampler.hpp"
#include "ember/speculative.hpp"

namespace ember {

struct SessionOptions {
  // KV-cache size and storage. Default: 4096 tokens, F16.
  KVCacheOptions kv;
  // Most prompt tokens evaluated in one forward pass; longer prompts are split.
  // Also the granularity of cancellation during prefill. Default 512; range [1, 65536].
  int32_t prefill_chunk_size = 512;
  // Not used: every session runs on its model's executor with ModelOptions::threads
  // threads. Kept so that existing code compiles; range [0, 1024].
  int threads = 0;
  // Sum every token's ops in one order whatever else is in its step (as the Engine
  // does, EngineOptions::batch_invariant), so that logits do not depend on how the
  // tokens were grouped into steps. Default false: llama.cpp's orders, whose logits
  // match llama.cpp's bit for bit.
  bool batch_invariant = false;
};

// How prefill(), decode() and evaluate() ended.
enum class Outcome {
  ok,          // every token was evaluated
  cancelled,   // cancel() stopped the call; the chunks evaluated before it stay
  cache_full,  // the tokens do not fit the context or the KV pool; nothing was added
};
EMBER_API const char* to_string(Outcome outcome) noexcept;

// What a streaming callback returns.
enum class Control { proceed, stop };
inline constexpr Control Continue = Control::proceed;
inline constexpr Control Stop = Control::stop;

// Receives each piece of generated text as soon as it is complete UTF-8 (and not
// possibly the start of a stop string). Returning Stop ends generation.
using TokenCallback = std::function<Control(std::string_view piece)>;

// One generated token as a token callback (Session::generate, Engine requests) sees it.
struct TokenEvent {
  int32_t token = -1;      // the token id; -1 for text released at the end of generation
  std::string_view text;   // text released with it (complete UTF-8; may be empty)
  float logprob = std::numeric_limits<float>::quiet_NaN();  // log p(token), when asked for
};

struct GenerateOptions {
  // Most tokens to generate. Default 256; range [0, 1 << 24].
  int32_t max_tokens = 256;
  // Generation ends when the text produced so far ends with one of these; the stop
  // string itself is not returned or streamed. Default none.
  std::vector<std::string> stop_strings;
  // Generation ends after sampling one of these tokens (not returned). Default none.
  std::vector<int32_t> stop_tokens;
  // Also stop at the model's end-of-generation tokens (EOS, end-of-turn). Default true.
  bool stop_at_end_of_generation = true;
  // Prepend BOS to a text prompt when the session is empty and the model wants it. Default true.
  bool add_bos = true;
  // Parse control-token text (e.g. "<start_of_turn>") in a text prompt. Default true.
  bool parse_special = true;
  // Compute TokenEvent::logprob for a token callback (one log-sum-exp over the
  // vocabulary per token). Default false.
  bool logprobs = false;
  // Speculative decoding (ember/speculative.hpp). Default off. With it the session
  // sums in the batch-invariant order (as SessionOptions::batch_invariant), so its
  // tokens equal plain generation on a session with batch_invariant = true, also
  // under KV eviction (StreamingLLM, H2O), whose verification steps evict token by
  // token as plain steps do and cut rejected drafts exactly (docs/speculative.md).
  SpeculativeOptions speculative;
};

enum class StopReason {
  max_tokens,         // generated max_tokens tokens
  end_of_generation,  // the model produced an end-of-generation token
  stop_token,         // one of GenerateOptions::stop_tokens
  stop_string,        // the text ended with one of GenerateOptions::stop_strings
  callback,           // the callback returned Stop
  cancelled,          // cancel() was called
  context_full,       // the KV cache has no room for another token
};
EMBER_API const char* to_string(StopReason reason) noexcept;

// Timing of one generate() call.
struct GenerationMetrics {
  int32_t prompt_tokens = 0;        // tokens evaluated for the prompt
  int32_t generated_tokens = 0;     // tokens sampled
  double prefill_seconds = 0.0;     // evaluating the prompt
  double decode_seconds = 0.0;      // generating, after the prompt
  double time_to_first_token = 0.0; // from the call to the first sampled token, in seconds
  double prefill_tokens_per_second() const { return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0.0; }
  double decode_tokens_per_second() const { return decode_seconds > 0 ? generated_tokens / decode_seconds : 0.0; }
};

struct GenerateResult {
  std::string text;               // generated text (without a matched stop string)
  std::vector<int32_t> tokens;    // generated tokens (without a stop token)
  StopReason stop_reason = StopReason::max_tokens;
  GenerationMetrics metrics;
  SpeculativeMetrics speculative; // drafts proposed and accepted (zero without speculation)
};

// Ownership: the host owns a Session (unique_ptr from Model::new_session or fork);
// it holds a reference to its Model. Threads: every member is for the one thread
// that uses the session at a time, except cancel(); spans and references returned
// stay valid until the next non-const call on the session.
class EMBER_API Session {
 public:
  // Frees the session's cache pages (shared ones stay with their other holders) and
  // hands free pool memory back to the system.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const Model& model() const;
  const SessionOptions& options() const;

  // Appends tokens to the context, evaluating them in chunks of prefill_chunk_size.
  // Returns cancelled when cancel() stopped it (the chunks evaluated before stay)
  // and cache_full when the tokens do not fit (nothing added). Throws
  // invalid_argument for a bad token id, adding nothing.
  Outcome prefill(std::span<const int32_t> tokens);
  // Tokenizes `text` (BOS if the session is empty and add_bos) and prefills it.
  Outcome prefill(std::string_view text, bool add_bos = true, bool parse_special = true);
  // Appends one token and evaluates it (one decode step).
  Outcome decode(int32_t token);
  // Next-token logits after the last token of the context [n_vocab]; empty before any token.
  std::span<const float> logits() const;

  // Evaluates `tokens` after the current context and returns the logits of every one
  // of them, [tokens.size()][n_vocab] row-major (for scoring short texts); empty when
  // the call did not finish (use the overload below to tell cancelled from cache_full).
  std::vector<float> evaluate(std::span<const int32_t> tokens);
  // As above, handing each row to `on_logits(index into tokens, row [n_vocab])` as soon
  // as it is computed, so long texts need no [n_tokens][n_vocab] buffer (perplexity).
  // on_logits runs while the model's executor is locked: it may read sessions'
  // state but must not evaluate (prefill, decode, generate) on the same model.
  using LogitsCallback = std::function<void(size_t index, std::span<const float> logits)>;
  Outcome evaluate(std::span<const int32_t> tokens, const LogitsCallback& on_logits);

  // Prefills `prompt` then samples up to max_tokens tokens, streaming each piece to
  // `on_piece`. The prompt may be empty to continue from the current context.
  GenerateResult generate(std::string_view prompt, Sampler& sampler, const GenerateOptions& options = {},
                          const TokenCallback& on_piece = {});
  GenerateResult generate(std::span<const int32_t> prompt, Sampler& sampler, const GenerateOptions& options = {},
                          const TokenCallback& on_piece = {});
  // The same, handing `on_token` every generated token: its id, the text released
  // with it (may be empty while a UTF-8 character or a possible stop string is
  // incomplete) and, with options.logprobs, its log-probability under the model
  // (before the sampler's penalties, bias and temperature).
  using TokenEventCallback = std::function<Control(const TokenEvent&)>;
  GenerateResult generate(std::string_view prompt, Sampler& sampler, const GenerateOptions& options,
                          const TokenEventCallback& on_token);
  GenerateResult generate(std::span<const int32_t> prompt, Sampler& sampler, const GenerateOptions& options,
                          const TokenEventCallback& on_token);

  // Asks a running prefill/decode/evaluate/generate to stop; it takes effect within
  // one prefill chunk or one token. Safe from any thread. A cancel() is never lost:
  // when no call is running, the next call returns cancelled at once (evaluating
  // nothing). The call that reports cancelled consumes it.
  void cancel() noexcept;

  // Keeps the first `n_tokens` tokens of the context and forgets the rest, freeing
  // their cache pages. When a sliding window or an eviction already dropped cells the
  // shorter context needs, the kept tokens are evaluated again by the next call.
  void rewind(int32_t n_tokens);
  // Forgets everything.
  void reset();

  int32_t position() const;                    // tokens in the context
  std::span<const int32_t> tokens() const;     // the context's tokens
  int32_t capacity() const;                    // most tokens the context can hold (none eviction)

  // A new session with this one's context, sharing its cache pages copy-on-write: the
  // fork's first token needs no recomputation of the prefix. Same options and policy.
  std::unique_ptr<Session> fork() const;

  // The whole state (tokens, logits, cache contents) as a versioned blob, and back.
  // load_state() throws Error(invalid_argument) for a corrupted blob or one saved with
  // another model or other KV options, leaving the session unchanged.
  std::string save_state() const;
  void load_state(std::string_view blob);

  // This session's share of the KV pool.
  KVSessionMemory kv_memory() const;

  struct Impl;

 private:
  friend class Model;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember
