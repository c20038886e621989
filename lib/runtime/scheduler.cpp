// One engine step: cancellations, admission by free pages (with prefix sharing),
// the batch (one decode token per running request, then prefill chunks within the
// token budget), the forward pass, sampling and streaming, and preemption when
// the KV pool runs dry.
#include <algorithm>

#include "common/fail.hpp"
#include "model/loaded_model.hpp"
#include "runtime/engine_impl.hpp"

namespace ember {
namespace {

double seconds_between(EngineClock::time_point a, EngineClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

enum class Admission { admitted, deferred, no_room };

}  // namespace

int64_t Engine::Impl::pages_for(int64_t tokens) const {
  const int32_t pt = cache.page_tokens();
  const KVCacheOptions& kv = options.kv;
  if (kv.eviction == KVEviction::streaming) tokens = std::min<int64_t>(tokens, int64_t(kv.sinks) + kv.window);
  if (kv.eviction == KVEviction::h2o) tokens = std::min<int64_t>(tokens, int64_t(kv.heavy) + kv.recent);
  int64_t pages = 0;
  for (const model::LayerParams& lp : m.loaded->hparams.layers) {
    // A sliding-window layer holds its window plus one prefill chunk and a page of slack.
    const int64_t held =
        lp.window > 0 ? std::min<int64_t>(tokens, int64_t(lp.window) + options.prefill_chunk_size + pt) : tokens;
    pages += (held + pt - 1) / pt + 1;
  }
  return pages;
}

void Engine::Impl::publish(EngineRequest& r) {
  std::lock_guard lock(mutex);
  const GenerateResult& g = r.gen->result();
  r.published.state = RequestState::running;
  r.published.text = g.text;
  r.published.tokens = g.tokens;
  r.published.preemptions = r.preemptions;
  r.published.cached_prompt_tokens = r.cached_prompt_tokens;
}

void Engine::Impl::end_request(EngineRequest& r) {
  const auto now = EngineClock::now();
  RequestResult& out = r.published;
  if (r.gen) {
    GenerateResult& g = r.gen->result();
    out.text = std::move(g.text);
    out.tokens = std::move(g.tokens);
    out.stop_reason = g.stop_reason;
  } else {
    out.stop_reason = StopReason::cancelled;
  }
  out.state = RequestState::finished;
  out.preemptions = r.preemptions;
  out.cached_prompt_tokens = r.cached_prompt_tokens;
  out.queue_seconds = r.admitted_once ? seconds_between(r.submitted, r.admitted) : seconds_between(r.submitted, now);
  out.total_seconds = seconds_between(r.submitted, now);
  if (!out.tokens.empty()) {
    out.time_to_first_token = seconds_between(r.submitted, r.first_token);
    if (out.tokens.size() > 1)
      out.time_per_output_token = seconds_between(r.first_token, r.last_token) / double(out.tokens.size() - 1);
  }
  // Free the pages before the host hears of the end.
  r.gen.reset();
  r.seq.reset();
  record_end(r);
  {
    std::lock_guard lock(mutex);
    r.ended = true;
    running.erase(std::remove_if(running.begin(), running.end(), [&](const auto& p) { return p.get() == &r; }),
                  running.end());
  }
  changed.notify_all();
  if (r.request.on_done) r.request.on_done(out);
}

void Engine::Impl::prepare(EngineRequest& r) {
  if (!r.gen) {
    r.seq = std::make_unique<runtime::Sequence>(model, options.kv, options.prefill_chunk_size);
    EngineRequest* self = &r;
    runtime::TokenSink sink = [self](const TokenEvent& event) {
      if (event.token >= 0) {
        const auto now = EngineClock::now();
        if (self->gen->result().tokens.size() == 1) self->first_token = now;
        self->last_token = now;
      }
      return self->request.on_token ? self->request.on_token(event) : Control::proceed;
    };
    r.gen = std::make_unique<runtime::Generation>(*r.seq, *r.sampler, r.request.generate, std::move(sink), r.prompt,
                                                  r.request.logprobs);
    if (r.drafts && !r.spec) r.spec = std::make_unique<runtime::SpeculativeState>(r.request.generate.speculative);
  }
}

void Engine::Impl::admit(EngineClock::time_point now) {
  std::vector<std::shared_ptr<EngineRequest>> candidates;
  {
    std::lock_guard lock(mutex);
    candidates = waiting;
  }
  const int32_t pt = cache.page_tokens();
  const int n_layer = m.loaded->hparams.n_layer;
  for (const std::shared_ptr<EngineRequest>& r : candidates) {
    if (int32_t(running.size()) >= options.max_batch_size) break;
    if (r->cancel_requested) continue;
    prepare(*r);
    runtime::Sequence& seq = *r->seq;
    Admission outcome = Admission::admitted;
    // Prefix sharing: the longest prefix of this prompt that a running request has
    // in the cache (at least a page, and never the whole prompt: its last token
    // must be evaluated to give logits).
    if (options.prefix_sharing && !r->admitted_once && seq.n_evaluated() == 0) {
      size_t best = 0;
      const runtime::Sequence* donor = nullptr;
      for (const auto& other : running) {
        const size_t n = std::min(common_prefix(other->seq->tokens(), r->prompt), r->prompt.size() - 1);
        if (n > best) best = n, donor = other->seq.get();
      }
      if (best >= size_t(pt)) {
        if (donor->n_evaluated() < best) {
          outcome = Admission::deferred;  // the donor is still prefilling it: share it next step
        } else if (seq.share_prefix(*donor, best)) {
          r->cached_prompt_tokens = int32_t(best);
        }
      }
    }
    if (outcome == Admission::admitted) {
      int64_t need = 0, free_pages = 0;
      {
        std::lock_guard lock(ex.mutex());
        need = std::min(cache.pages_needed(seq.id(), int32_t(seq.n_pending())), pages_for(int64_t(seq.n_pending())));
        free_pages = cache.pool().stats().pages_free;
      }
      // Keep a page per layer for each running request's next decode token.
      const int64_t reserve = int64_t(running.size()) * n_layer;
      if (need + reserve > free_pages) {
        if (r->cached_prompt_tokens > 0) {
          seq.drop_cache();
          r->cached_prompt_tokens = 0;
        }
        if (running.empty() && cache.pool().stats().pages_used == 0) {
          // Cannot fit even in an empty pool: end it rather than wait for ever.
          {
            std::lock_guard lock(mutex);
            waiting.erase(std::find(waiting.begin(), waiting.end(), r));
          }
          r->gen->finish(StopReason::context_full);
          end_request(*r);
          continue;
        }
        outcome = Admission::no_room;
      }
    }
    if (outcome == Admission::deferred) continue;
    if (outcome == Admission::no_room) break;
    r->admit_order = next_admit++;
    if (!r->admitted_once) {
      r->admitted_once = true;
      r->admitted = now;
      std::lock_guard lock(metrics_mutex);
      counters.queue.record(seconds_between(r->submitted, now));
      if (options.prefix_sharing) {
        counters.prefix_lookup += r->prompt.size();
        counters.prefix_hits += uint64_t(r->cached_prompt_tokens);
      }
    }
    std::lock_guard lock(mutex);
    waiting.erase(std::find(waiting.begin(), waiting.end(), r));
    running.push_back(r);
    r->published.state = RequestState::running;
  }
}

void Engine::Impl::preempt(EngineRequest& r) {
  r.seq->drop_cache();
  ++r.preemptions;
  {
    std::lock_guard lock(metrics_mutex);
    ++counters.preemptions;
  }
  std::lock_guard lock(mutex);
  running.erase(std::remove_if(running.begin(), running.end(), [&](const auto& p) { return p.get() == &r; }),
                running.end());
  const auto self = requests.at(r.handle);
  const auto at = std::upper_bound(waiting.begin(), waiting.end(), self,
                                   [](const auto& a, const auto& b) { return runs_before(*a, *b); });
  waiting.insert(at, self);
  r.published.state = RequestState::waiting;
  r.published.preemptions = r.preemptions;
}

int32_t Engine::Impl::step_locked() {
  const auto t0 = EngineClock::now();
  // ---- cancellations (also shutdown) ----
  std::vector<std::shared_ptr<EngineRequest>> cancelled;
  {
    std::lock_guard lock(mutex);
    for (auto* list : {&waiting, &running}) {
      for (const auto& r : *list)
        if (r->cancel_requested) cancelled.push_back(r);
      list->erase(std::remove_if(list->begin(), list->end(), [](const auto& r) { return r->cancel_requested; }),
                  list->end());
    }
  }
  for (const auto& r : cancelled) {
    if (r->gen) r->gen->finish(StopReason::cancelled);
    end_request(*r);
  }

  // ---- admission and the batch ----
  admit(t0);
  std::vector<runtime::StepPart> parts;
  std::vector<std::shared_ptr<EngineRequest>> owners;
  std::vector<bool> speculative;  // the part carries drafts to verify (or is a speculative request's plain step)
  int64_t budget = options.max_batch_tokens;
  const std::vector<std::shared_ptr<EngineRequest>> batch_order = running;
  // Decode tokens first: a running generation never waits for a prompt. A
  // speculative request adds its drafts, within the step's token budget.
  for (const auto& r : batch_order) {
    if (budget == 0) break;
    if (!r->gen->prefilling() && r->seq->n_pending() <= 1) {
      const bool spec = r->spec && r->seq->n_pending() == 1 && !r->gen->done();
      parts.push_back(spec ? runtime::begin_speculative_step(*r->gen, *r->seq, *r->drafts, *r->spec, budget - 1)
                           : r->gen->next_part(1));
      owners.push_back(r);
      speculative.push_back(spec);
      budget -= int64_t(parts.back().tokens.size());
    }
  }
  const std::vector<std::shared_ptr<EngineRequest>> decoding = owners;  // (their drafts are pending too)
  for (const auto& r : batch_order) {
    if (budget == 0) break;
    if (std::find(decoding.begin(), decoding.end(), r) != decoding.end()) continue;
    if (r->gen->prefilling() || r->seq->n_pending() > 1) {
      const int64_t chunk = std::min<int64_t>({budget, options.prefill_chunk_size, r->seq->chunk()});
      parts.push_back(r->gen->next_part(size_t(chunk)));
      owners.push_back(r);
      speculative.push_back(false);
      budget -= int64_t(parts.back().tokens.size());
    }
  }

  // ---- the forward pass ----
  const auto t1 = EngineClock::now();
  size_t evaluated = 0;
  try {
    evaluated = ex.step(cache, parts, nullptr,  // parts without tokens (sampling only) are skipped
                        options.batch_invariant ? backend::SumOrder::batch_invariant : backend::SumOrder::llama_cpp);
  } catch (const Error& err) {
    // The pass itself failed and nothing of it stays: end the requests it held.
    for (size_t i = 0; i < owners.size(); ++i)
      if (speculative[i]) runtime::abandon_speculative_step(*owners[i]->seq, *owners[i]->spec);
    for (const auto& r : owners) {
      r->published.error = err.what();
      r->gen->finish(StopReason::cancelled);
      end_request(*r);
    }
    throw;
  }
  const auto t2 = EngineClock::now();

  // ---- sampling, streaming, ends ----
  uint64_t prompt_tokens = 0, generated = 0;
  int pool_short = 0;
  double sampling = 0.0;
  for (size_t i = 0; i < parts.size(); ++i) {
    EngineRequest& r = *owners[i];
    runtime::StepPart& part = parts[i];
    const bool drafted = speculative[i] && part.tokens.size() > 1;
    if (part.status == runtime::StepStatus::cache_full && !drafted &&
        (r.seq->evicts() || r.seq->tokens().size() <= size_t(capacity))) {
      if (speculative[i]) runtime::abandon_speculative_step(*r.seq, *r.spec);
      ++pool_short;  // the pool, not the request's context, is full: retry after a preemption
      continue;
    }
    // Tokens evaluated before the generation samples are prompt (or recomputed context).
    if (part.status == runtime::StepStatus::ok && !speculative[i] && (r.gen->prefilling() || part.tokens.size() > 1))
      prompt_tokens += part.tokens.size();
    const size_t before = r.gen->result().tokens.size();
    const auto sample_start = EngineClock::now();
    if (speculative[i]) {
      SpeculativeMetrics& sm = r.gen->result().speculative;
      const int64_t drafted_before = sm.drafted, accepted_before = sm.accepted;
      // A part whose drafts did not fit drops them and retries plainly next step.
      runtime::finish_speculative_step(*r.gen, *r.seq, part, *r.spec, seconds_between(t1, t2), sm);
      std::lock_guard lock(metrics_mutex);
      counters.drafted += uint64_t(sm.drafted - drafted_before);
      counters.accepted += uint64_t(sm.accepted - accepted_before);
    } else {
      r.gen->after_step(part);
    }
    sampling += seconds_between(sample_start, EngineClock::now());
    generated += r.gen->result().tokens.size() - before;
    if (r.gen->done()) {
      end_request(r);
    } else {
      publish(r);
    }
  }
  // Preempt the most recently admitted requests, one per part the pool could not hold.
  for (; pool_short > 0; --pool_short) {
    std::shared_ptr<EngineRequest> victim;
    for (const auto& r : running)
      if (!victim || r->admit_order > victim->admit_order) victim = r;
    if (!victim) break;
    preempt(*victim);
  }
  const auto t3 = EngineClock::now();
  {
    std::lock_guard lock(metrics_mutex);
    counters.prompt_tokens += prompt_tokens;
    counters.generated_tokens += generated;
    if (evaluated > 0) {
      ++counters.steps;
      counters.step_tokens += evaluated;
      counters.busy_seconds += seconds_between(t0, t3);
      counters.scheduler_seconds += seconds_between(t0, t1) + seconds_between(t2, t3) - sampling;
      counters.sampling_seconds += sampling;
    }
  }
  check_alerts();
  return int32_t(evaluated);
}

}  // namespace ember
