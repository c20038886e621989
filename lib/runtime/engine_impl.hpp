// The inside of ember::Engine, shared by engine.cpp (API, threads, requests),
// scheduler.cpp (one step: admission, batch, preemption) and engine_metrics.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "ember/engine.hpp"
#include "metrics/alerts.hpp"
#include "metrics/histogram.hpp"
#include "runtime/generation.hpp"
#include "runtime/model_impl.hpp"
#include "runtime/sequence.hpp"
#include "runtime/speculative.hpp"

namespace ember {

using EngineClock = std::chrono::steady_clock;

// One request inside the engine. Its sequence and generation are touched only by
// the stepping thread; `published` (under Impl::mutex) is what result() shows.
struct EngineRequest {
  RequestHandle handle = 0;
  Request request;
  std::vector<int32_t> prompt;
  std::optional<Sampler> sampler;
  std::unique_ptr<runtime::Sequence> seq;
  std::unique_ptr<runtime::Generation> gen;
  // Speculative decoding (GenerateOptions::speculative), when asked for and possible.
  std::unique_ptr<runtime::DraftSource> drafts;
  std::unique_ptr<runtime::SpeculativeState> spec;
  RequestResult published;
  bool cancel_requested = false;  // under Impl::mutex
  bool ended = false;             // finished or rejected (under Impl::mutex)
  bool admitted_once = false;
  uint64_t submit_order = 0;
  uint64_t admit_order = 0;       // larger = admitted more recently
  int32_t preemptions = 0;
  int32_t cached_prompt_tokens = 0;
  EngineClock::time_point submitted, admitted, first_token, last_token;
};

// Waiting order: higher priority first, then earlier submission.
inline bool runs_before(const EngineRequest& a, const EngineRequest& b) {
  return a.request.priority != b.request.priority ? a.request.priority > b.request.priority
                                                  : a.submit_order < b.submit_order;
}

// Counters and histograms (under Impl::metrics_mutex).
struct EngineCounters {
  EngineClock::time_point created = EngineClock::now();
  uint64_t submitted = 0, finished = 0, cancelled = 0, rejected = 0;
  uint64_t prompt_tokens = 0, generated_tokens = 0;
  uint64_t steps = 0, step_tokens = 0;
  double busy_seconds = 0.0, scheduler_seconds = 0.0, sampling_seconds = 0.0;
  uint64_t prefix_lookup = 0, prefix_hits = 0, preemptions = 0;
  uint64_t drafted = 0, accepted = 0;  // speculative tokens
  metrics::Histogram ttft, tpot, e2e, queue;
};

struct Engine::Impl {
  Impl(std::shared_ptr<const Model> model, const EngineOptions& options);
  ~Impl();

  std::shared_ptr<const Model> model;
  const Model::Impl& m;
  EngineOptions options;
  runtime::Executor& ex;
  kv::KVCache& cache;
  int32_t capacity = 0;  // most tokens of one request's context

  // Requests: all live ones by handle, the waiting queue and the running set.
  mutable std::mutex mutex;
  mutable std::condition_variable changed;  // a request ended, or work arrived
  std::map<RequestHandle, std::shared_ptr<EngineRequest>> requests;
  std::vector<std::shared_ptr<EngineRequest>> waiting;  // best first: priority, then submission
  std::vector<std::shared_ptr<EngineRequest>> running;  // stepping thread only
  uint64_t next_handle = 1, next_submit = 0, next_admit = 0;
  bool shut_down = false;

  // One step at a time; the thread that runs it (callbacks may not step again).
  std::mutex step_mutex;
  std::atomic<std::thread::id> stepping_thread{};  // read by other threads (step() and shutdown() checks)
  std::atomic<std::thread::id> host_stepper{};     // the last thread that called step() (wait() checks)
  std::thread runner;
  bool runner_stop = false;  // under mutex

  mutable std::mutex metrics_mutex;
  EngineCounters counters;
  metrics::AlertMonitor alerts;

  // engine.cpp
  RequestHandle reject(std::shared_ptr<EngineRequest> r, std::string reason);
  void publish(EngineRequest& r);
  void end_request(EngineRequest& r);
  void run_loop();

  // scheduler.cpp
  int32_t step_locked();
  void admit(EngineClock::time_point now);
  void prepare(EngineRequest& r);  // its sequence and generation, made at first admission
  void preempt(EngineRequest& r);
  int64_t pages_for(int64_t tokens) const;

  // engine_metrics.cpp
  void record_end(const EngineRequest& r);
  void check_alerts();
  EngineMetrics snapshot() const;
};

}  // namespace ember
