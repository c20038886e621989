// ember::Engine: many requests on one model, batched into shared forward passes.
//
// Continuous batching: every step runs one forward pass holding one decode token
// of each running request plus chunks of waiting prompts, so the weights are read
// once for all of them. Requests are admitted while the KV pool has their pages;
// when the pool runs dry mid-generation the most recently admitted request is
// preempted (its pages freed, its context recomputed later) and resumes with the
// same output. Prompts that share a prefix with a running request share its KV
// pages copy-on-write.
//
// Two ways to drive it:
//   - engine->start() runs the scheduler on one thread the engine starts; stop()
//     (or the destructor) joins it. Callbacks then run on that thread.
//   - engine->step() from the host's own loop (a game's frame loop) runs one step
//     and returns; callbacks run inside step().
// submit(), cancel(), metrics() and shutdown() are safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ember/export.hpp"
#include "ember/kv_cache.hpp"
#include "ember/metrics.hpp"
#include "ember/model.hpp"
#include "ember/sampler.hpp"
#include "ember/session.hpp"

namespace ember {

struct EngineOptions {
  // Most sequences in one step (running decodes plus prompts being prefilled).
  // Default 16: on a CPU one step's cost grows little up to ~16 tokens, because
  // the weights are read once; range [1, 1024].
  int32_t max_batch_size = 16;
  // Most tokens in one step. Default 512: enough for every decode token plus a
  // prefill chunk, small enough that a long prompt does not stall the decodes of
  // the others for more than one chunk's time; range [1, 65536].
  int32_t max_batch_tokens = 512;
  // Most prompt tokens of one request in one step (chunked prefill). Default 256:
  // half the token budget, so two prompts can make progress in one step while
  // decode tokens still fit; range [1, 65536].
  int32_t prefill_chunk_size = 256;
  // Most requests waiting for admission; submit() rejects beyond it. Default 4096;
  // range [1, 1 << 24].
  int32_t max_waiting = 4096;
  // Every request's KV options: context size (max_tokens), storage, eviction.
  // Default: 4096 tokens, F16, no eviction.
  KVCacheOptions kv;
  // Share KV pages of common prompt prefixes between requests. Default true.
  bool prefix_sharing = true;
  // Sum every token's ops in one order whatever else is in its step, so that a
  // request's output does not depend on the other requests, on how its prompt was
  // cut into chunks, or on a preemption. Default true. false: llama.cpp's orders,
  // where a token's logits can differ in the last bits with the batch around it
  // (then a near-tie can pick another token) and a Session's output matches
  // llama.cpp's bit for bit.
  bool batch_invariant = true;
  // Service-level objectives in seconds (0 = none): an alert fires when the P99 time
  // to first token (or time per output token) exceeds 1.5 times its SLO.
  double slo_ttft_seconds = 0.0;
  double slo_tpot_seconds = 0.0;
  // Alert when the KV pool utilisation stays below this fraction while requests
  // wait (the pool is over-sized for the load) or when speculative acceptance drops
  // below `min_acceptance`. Defaults 0.70 and 0.70; range [0, 1].
  double min_utilisation = 0.70;
  double min_acceptance = 0.70;
  // Receives each alert crossing (once when it fires, once when it clears), on the
  // stepping thread. Default none.
  std::function<void(const Alert&)> on_alert;
  // Price of the machine in any currency per hour, for cost per million tokens.
  // Default 0 (not reported); >= 0.
  double price_per_hour = 0.0;
};

enum class RequestState {
  waiting,    // queued, not admitted yet (also after a preemption)
  running,    // admitted: prefilling or generating
  finished,   // ended; see RequestResult::stop_reason
  rejected,   // never ran; see RequestResult::error
};
EMBER_API const char* to_string(RequestState state) noexcept;

struct RequestResult {
  RequestState state = RequestState::waiting;
  std::string text;                 // generated text (without a matched stop string)
  std::vector<int32_t> tokens;      // generated tokens
  StopReason stop_reason = StopReason::max_tokens;  // when finished
  std::string error;                // why a request was rejected
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0; // prompt tokens whose KV pages came from another request
  int32_t preemptions = 0;          // times this request was preempted and recomputed
  double queue_seconds = 0.0;       // submit to first admission
  double time_to_first_token = 0.0; // submit to the first sampled token
  double time_per_output_token = 0.0;  // mean seconds between generated tokens after the first
  double total_seconds = 0.0;       // submit to the end
};

struct Request {
  // The prompt: tokens if not empty, else chat messages if not empty (rendered with
  // the model's chat template), else text. BOS is added as GenerateOptions says.
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  std::vector<ChatMessage> messages;
  SamplerOptions sampler;      // each request samples with its own seeded Sampler
  GenerateOptions generate;    // max_tokens, stop strings and tokens, BOS, specials
  // Higher runs first among waiting requests; equal priorities in submission order.
  int32_t priority = 0;
  // Compute TokenEvent::logprob (one log-sum-exp over the vocabulary per token). Default false.
  bool logprobs = false;
  // Called for every generated token, on the stepping thread; return Stop to end
  // the request (StopReason::callback). Must not call step() (other Engine calls are fine).
  std::function<Control(const TokenEvent&)> on_token;
  // Called once when the request ends (finished or rejected), on the stepping thread
  // (or inside submit() for a request rejected at once).
  std::function<void(const RequestResult&)> on_done;
};

// A submitted request; 0 is never a valid handle.
using RequestHandle = uint64_t;

// Ownership: the host owns the Engine (unique_ptr from create); it holds a
// reference to its Model. Request results are values. Threads: see each member;
// callbacks run on the stepping thread and must not call step().
class EMBER_API Engine {
 public:
  // Throws invalid_argument for bad options (naming the field) or a vocab-only model.
  // Thread-safe (engines of one model share its thread pool and KV pools).
  static std::unique_ptr<Engine> create(std::shared_ptr<const Model> model, const EngineOptions& options = {});
  ~Engine();  // shutdown() and stop(); call it from a thread other than the engine's own
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineOptions& options() const;  // any thread

  // Queues a request and returns its handle. A request that can never run (empty
  // prompt, a prompt longer than the context, more tokens than the whole KV pool,
  // a full queue, bad sampler options, an engine shut down) is rejected: its state
  // is `rejected` with the reason in RequestResult::error, and on_done runs at once.
  RequestHandle submit(Request request);
  // Ends a waiting or running request with StopReason::cancelled at the next step.
  // Returns false for an unknown handle or a request that has already ended.
  bool cancel(RequestHandle handle);
  // The request's state and output so far. Throws invalid_argument for an unknown handle.
  RequestResult result(RequestHandle handle) const;
  // Blocks until the request has ended (the engine must be running or stepped by
  // another thread). Throws invalid_argument for an unknown handle, and instead of
  // blocking forever when called from a request callback, or, with no start(), from
  // the thread that last called step().
  RequestResult wait(RequestHandle handle) const;
  // Forgets an ended request (its result can no longer be read); false if it has not ended.
  bool release(RequestHandle handle);

  // Runs one step: admits what fits, builds the batch, runs it, samples, streams.
  // Returns the number of tokens evaluated (0 when there was nothing to do). Throws
  // invalid_argument when called while start()ed. One thread at a time (the host's loop).
  int32_t step();
  // Requests waiting or running. Any thread.
  int32_t pending() const;

  // Runs the scheduler on a thread of the engine's own until stop(). Call both
  // from the host's threads (not from a callback).
  void start();
  void stop();

  // Ends every waiting and running request with StopReason::cancelled and rejects
  // later submissions. Idempotent.
  void shutdown();

  // Latency, throughput and cache figures since create(). Any thread; values.
  EngineMetrics metrics() const;
  // The same in Prometheus text exposition format (version 0.0.4) and as JSON.
  std::string metrics_prometheus() const;
  std::string metrics_json() const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember
