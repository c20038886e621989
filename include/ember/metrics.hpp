// Engine metrics: a snapshot of latencies, throughput and cache use, and alerts.
//
// Latencies are in seconds. Percentiles come from log-spaced histograms whose
// buckets are at most 10 % wide, so a percentile is within 10 % of the exact
// order statistic. Prometheus and JSON renderings of the same figures come from
// Engine::metrics_prometheus() and Engine::metrics_json(); names there follow
// Prometheus conventions (ember_ prefix, base units, _total counters, _seconds
// histograms) and are listed in docs/engine.md.
#pragma once

#include <cstdint>
#include <string>

namespace ember {

// Summary of one latency distribution, in seconds.
struct LatencySummary {
  uint64_t count = 0;  // observations
  double mean = 0.0;
  double p50 = 0.0;
  double p90 = 0.0;
  double p99 = 0.0;
  double max = 0.0;
};

struct EngineMetrics {
  double uptime_seconds = 0.0;          // since the engine was created

  // Requests.
  uint64_t requests_submitted = 0;
  uint64_t requests_finished = 0;       // ended after running (any stop reason, cancellation included)
  uint64_t requests_cancelled = 0;      // of the finished, ended by cancel() or shutdown()
  uint64_t requests_rejected = 0;       // never admitted (bad input, full queue, shut down)
  int32_t requests_running = 0;         // admitted now
  int32_t requests_waiting = 0;         // queued now (preempted ones included)
  double requests_per_second = 0.0;     // finished requests / uptime

  // Tokens.
  uint64_t prompt_tokens = 0;           // prompt tokens evaluated (recomputation after preemption included)
  uint64_t generated_tokens = 0;        // tokens sampled
  double prompt_tokens_per_second = 0.0;     // prompt tokens / busy time
  double generated_tokens_per_second = 0.0;  // generated tokens / busy time
  double busy_seconds = 0.0;            // time spent in steps that evaluated tokens
  uint64_t steps = 0;                   // steps that evaluated tokens
  double mean_batch_tokens = 0.0;       // tokens per such step
  double scheduler_seconds = 0.0;       // time spent admitting, building batches and booking results
  double sampling_seconds = 0.0;        // time spent sampling, detokenizing and streaming (request callbacks included)

  // Latency distributions.
  LatencySummary time_to_first_token;   // submit to first sampled token
  LatencySummary time_per_output_token; // per request: mean gap between its generated tokens
  LatencySummary end_to_end;            // submit to end
  LatencySummary queue_time;            // submit to first admission

  // KV cache.
  double kv_utilisation = 0.0;          // pages in use / pages in the pool, now
  uint64_t prefix_lookup_tokens = 0;    // prompt tokens of admitted requests (prefix sharing enabled)
  uint64_t prefix_hit_tokens = 0;       // of which shared from another request's pages
  double prefix_hit_rate = 0.0;         // hit / lookup tokens
  uint64_t preemptions = 0;             // sequences preempted (pages freed, recomputed later)

  // Speculative decoding (0 until it runs in the engine).
  uint64_t draft_tokens = 0;
  uint64_t accepted_tokens = 0;
  double acceptance_rate = 0.0;

  // Cost, when EngineOptions::price_per_hour is set: price of the busy time per
  // million generated tokens.
  double cost_per_million_tokens = 0.0;
};

// An alert crossing, reported once when it fires and once when it clears.
struct Alert {
  std::string name;      // "ttft_p99", "tpot_p99", "kv_utilisation", "acceptance"
  bool firing = false;   // true: the condition started; false: it ended
  double value = 0.0;    // the value that crossed (seconds, or a fraction)
  double threshold = 0.0;
};

}  // namespace ember
