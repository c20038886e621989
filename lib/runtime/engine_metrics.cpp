// Engine metrics: recording, snapshots, Prometheus/JSON exposition and alerts.
#include <optional>

#include "metrics/exposition.hpp"
#include "runtime/engine_impl.hpp"

namespace ember {
namespace {

LatencySummary summarise(const metrics::Histogram& h) {
  LatencySummary s;
  s.count = h.count();
  if (s.count == 0) return s;
  s.mean = h.mean();
  s.p50 = h.quantile(0.50);
  s.p90 = h.quantile(0.90);
  s.p99 = h.quantile(0.99);
  s.max = h.max();
  return s;
}

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

}  // namespace

void Engine::Impl::record_end(const EngineRequest& r) {
  const RequestResult& out = r.published;
  std::lock_guard lock(metrics_mutex);
  ++counters.finished;
  if (out.stop_reason == StopReason::cancelled) ++counters.cancelled;
  counters.e2e.record(out.total_seconds);
  if (!out.tokens.empty()) counters.ttft.record(out.time_to_first_token);
  if (out.tokens.size() > 1) counters.tpot.record(out.time_per_output_token);
  if (!r.admitted_once) counters.queue.record(out.queue_seconds);
}

EngineMetrics Engine::Impl::snapshot() const {
  EngineMetrics s;
  {
    std::lock_guard lock(mutex);
    s.requests_running = int32_t(running.size());
    s.requests_waiting = int32_t(waiting.size());
  }
  {
    std::lock_guard lock(ex.mutex());
    const kv::PoolStats pool = cache.pool().stats();
    s.kv_utilisation = ratio(double(pool.pages_used), double(pool.pages_total));
  }
  std::lock_guard lock(metrics_mutex);
  const EngineCounters& c = counters;
  s.uptime_seconds = std::chrono::duration<double>(EngineClock::now() - c.created).count();
  s.requests_submitted = c.submitted;
  s.requests_finished = c.finished;
  s.requests_cancelled = c.cancelled;
  s.requests_rejected = c.rejected;
  s.requests_per_second = ratio(double(c.finished), s.uptime_seconds);
  s.prompt_tokens = c.prompt_tokens;
  s.generated_tokens = c.generated_tokens;
  s.busy_seconds = c.busy_seconds;
  s.prompt_tokens_per_second = ratio(double(c.prompt_tokens), c.busy_seconds);
  s.generated_tokens_per_second = ratio(double(c.generated_tokens), c.busy_seconds);
  s.steps = c.steps;
  s.mean_batch_tokens = ratio(double(c.step_tokens), double(c.steps));
  s.scheduler_seconds = c.scheduler_seconds;
  s.sampling_seconds = c.sampling_seconds;
  s.time_to_first_token = summarise(c.ttft);
  s.time_per_output_token = summarise(c.tpot);
  s.end_to_end = summarise(c.e2e);
  s.queue_time = summarise(c.queue);
  s.prefix_lookup_tokens = c.prefix_lookup;
  s.prefix_hit_tokens = c.prefix_hits;
  s.prefix_hit_rate = ratio(double(c.prefix_hits), double(c.prefix_lookup));
  s.preemptions = c.preemptions;
  s.draft_tokens = c.drafted;
  s.accepted_tokens = c.accepted;
  s.acceptance_rate = ratio(double(c.accepted), double(c.drafted));
  if (options.price_per_hour > 0 && c.generated_tokens > 0)
    s.cost_per_million_tokens = options.price_per_hour * (c.busy_seconds / 3600.0) * 1e6 / double(c.generated_tokens);
  return s;
}

void Engine::Impl::check_alerts() {
  if (alerts.rules().empty()) return;
  const EngineMetrics s = snapshot();
  std::vector<metrics::AlertEvent> events;
  {
    std::lock_guard lock(metrics_mutex);
    for (const metrics::AlertRule& rule : alerts.rules()) {
      std::optional<metrics::AlertEvent> e;
      if (rule.name == "ttft_p99") {
        e = alerts.observe(rule.name, s.time_to_first_token.p99, s.time_to_first_token.count);
      } else if (rule.name == "tpot_p99") {
        e = alerts.observe(rule.name, s.time_per_output_token.p99, s.time_per_output_token.count);
      } else if (rule.name == "kv_utilisation") {
        // Only meaningful under load: requests wait although the pool has room.
        e = alerts.observe(rule.name, s.requests_waiting > 0 ? s.kv_utilisation : 1.0, 1);
      } else if (rule.name == "acceptance") {
        e = alerts.observe(rule.name, s.acceptance_rate, s.draft_tokens);
      }
      if (e) events.push_back(*e);
    }
  }
  if (!options.on_alert) return;
  for (const metrics::AlertEvent& e : events) options.on_alert(Alert{e.name, e.firing, e.value, e.threshold});
}

namespace {

std::vector<metrics::Family> families(const EngineMetrics& s, const EngineCounters& c) {
  using metrics::Family;
  using metrics::Kind;
  auto counter = [](std::string name, std::string help, double v) {
    return Family{std::move(name), std::move(help), Kind::counter, {{{}, v}}, nullptr, {}};
  };
  auto gauge = [](std::string name, std::string help, double v) {
    return Family{std::move(name), std::move(help), Kind::gauge, {{{}, v}}, nullptr, {}};
  };
  auto histogram = [](std::string name, std::string help, const metrics::Histogram& h) {
    return Family{std::move(name), std::move(help), Kind::histogram, {}, &h, {}};
  };
  std::vector<Family> f;
  f.push_back(counter("ember_requests_submitted_total", "Requests submitted.", double(s.requests_submitted)));
  f.push_back(counter("ember_requests_finished_total", "Requests that ended after running.", double(s.requests_finished)));
  f.push_back(counter("ember_requests_cancelled_total", "Requests ended by cancel() or shutdown().",
                      double(s.requests_cancelled)));
  f.push_back(counter("ember_requests_rejected_total", "Requests rejected at submission.", double(s.requests_rejected)));
  f.push_back(gauge("ember_requests_running", "Requests admitted now.", s.requests_running));
  f.push_back(gauge("ember_requests_waiting", "Requests queued now.", s.requests_waiting));
  f.push_back(gauge("ember_requests_per_second", "Finished requests per second of uptime.", s.requests_per_second));
  f.push_back(counter("ember_prompt_tokens_total", "Prompt tokens evaluated (recomputation included).",
                      double(s.prompt_tokens)));
  f.push_back(counter("ember_generated_tokens_total", "Tokens generated.", double(s.generated_tokens)));
  f.push_back(gauge("ember_prompt_tokens_per_second", "Prompt tokens per busy second.", s.prompt_tokens_per_second));
  f.push_back(gauge("ember_generated_tokens_per_second", "Generated tokens per busy second.",
                    s.generated_tokens_per_second));
  f.push_back(counter("ember_busy_seconds_total", "Seconds spent in steps that evaluated tokens.", s.busy_seconds));
  f.push_back(counter("ember_scheduler_seconds_total", "Seconds spent scheduling (outside the forward pass).",
                      s.scheduler_seconds));
  f.push_back(counter("ember_sampling_seconds_total", "Seconds spent sampling, detokenizing and streaming.",
                      s.sampling_seconds));
  f.push_back(counter("ember_steps_total", "Steps that evaluated tokens.", double(s.steps)));
  f.push_back(histogram("ember_time_to_first_token_seconds", "Submission to the first generated token.", c.ttft));
  f.push_back(histogram("ember_time_per_output_token_seconds", "Mean gap between a request's generated tokens.", c.tpot));
  f.push_back(histogram("ember_request_duration_seconds", "Submission to the end of a request.", c.e2e));
  f.push_back(histogram("ember_queue_time_seconds", "Submission to admission.", c.queue));
  f.push_back(gauge("ember_kv_utilisation_ratio", "KV pages in use over pages in the pool.", s.kv_utilisation));
  f.push_back(counter("ember_prefix_cache_lookup_tokens_total", "Prompt tokens looked up for shared prefixes.",
                      double(s.prefix_lookup_tokens)));
  f.push_back(counter("ember_prefix_cache_hit_tokens_total", "Prompt tokens whose KV pages were shared.",
                      double(s.prefix_hit_tokens)));
  f.push_back(gauge("ember_prefix_cache_hit_ratio", "Shared over looked-up prompt tokens.", s.prefix_hit_rate));
  f.push_back(counter("ember_preemptions_total", "Requests preempted (pages freed, context recomputed).",
                      double(s.preemptions)));
  f.push_back(counter("ember_draft_tokens_total", "Speculative tokens drafted.", double(s.draft_tokens)));
  f.push_back(counter("ember_accepted_tokens_total", "Speculative tokens accepted.", double(s.accepted_tokens)));
  f.push_back(gauge("ember_speculative_acceptance_ratio", "Accepted over drafted tokens.", s.acceptance_rate));
  f.push_back(gauge("ember_cost_per_million_tokens", "Price of the busy time per million generated tokens.",
                    s.cost_per_million_tokens));
  return f;
}

}  // namespace

std::string Engine::metrics_prometheus() const {
  const EngineMetrics s = impl_->snapshot();
  std::lock_guard lock(impl_->metrics_mutex);
  return metrics::to_prometheus(families(s, impl_->counters));
}

std::string Engine::metrics_json() const {
  const EngineMetrics s = impl_->snapshot();
  std::lock_guard lock(impl_->metrics_mutex);
  return metrics::to_json(families(s, impl_->counters));
}

}  // namespace ember
