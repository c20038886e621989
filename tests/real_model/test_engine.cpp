// The Engine on the real model: continuous batching gives every request exactly
// what it gives alone (greedy and seeded), through cancellation, preemption and
// prefix sharing; both ways of driving it; bad input; metrics and alerts.
#include <atomic>
#include <map>
#include <thread>

#include "common/expect_error.hpp"
#include "real_model/real_model.hpp"

using namespace ember;
using test::expect_error;

namespace {

// A request of the mix: prompt, when it arrives (engine step), how much it generates.
struct Spec {
  std::vector<int32_t> prompt;
  int arrive_at_step = 0;
  int32_t max_tokens = 16;
  SamplerOptions sampler;
};

std::string passage(size_t words) {
  static const char* kWords[] = {"the", "harbour", "lamp", "was", "lit", "each", "night", "while",
                                 "storms", "rolled", "in", "from", "a", "grey", "and", "restless", "sea"};
  std::string text;
  for (size_t i = 0; i < words; ++i) text += std::string(i ? " " : "") + kWords[(i * 7 + words) % 17];
  return text;
}

// 16 requests: prompts of 3 to ~300 tokens, arrivals spread over the first steps,
// generation lengths 1 to 40.
std::vector<Spec> mix(const Model& model, bool sampled) {
  const std::vector<std::string> starts = {
      "Once upon a time", "The capital of France is", "def fibonacci(n):", "My favourite animal is",
      "In 1905, Albert Einstein", "List three colours:", "The recipe needs", "Dear diary, today",
  };
  std::vector<Spec> specs;
  for (int i = 0; i < 16; ++i) {
    Spec s;
    std::string text = starts[size_t(i) % starts.size()];
    if (i % 4 == 1) text = passage(size_t(20 + 60 * i)) + ". " + text;  // long prompts
    s.prompt = model.tokenize(text, true);
    s.arrive_at_step = (i * 3) % 11;
    s.max_tokens = int32_t(1 + (i * 13) % 40);
    if (sampled)
      s.sampler = {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .seed = uint64_t(1000 + i)};
    else
      s.sampler = {.temperature = 0.0f};
    specs.push_back(s);
  }
  return specs;
}

GenerateOptions gen_options(int32_t max_tokens) {
  GenerateOptions g;
  g.max_tokens = max_tokens;
  g.stop_at_end_of_generation = false;
  return g;
}

// The request run alone: an engine of the same options holding only it.
std::vector<int32_t> alone(std::shared_ptr<Model> model, const Spec& s, const EngineOptions& options = {}) {
  auto engine = Engine::create(model, options);
  Request r;
  r.prompt_tokens = s.prompt;
  r.sampler = s.sampler;
  r.generate = gen_options(s.max_tokens);
  const RequestHandle h = engine->submit(std::move(r));
  while (engine->pending() > 0) engine->step();
  return engine->result(h).tokens;
}

struct RunOutcome {
  std::vector<RequestResult> results;
  EngineMetrics metrics;
};

// Submits each spec at its step and steps the engine until all have ended.
// `cancel_index`: a request to cancel once it has produced 3 tokens (-1: none).
RunOutcome run_engine(std::shared_ptr<Model> model, const std::vector<Spec>& specs, const EngineOptions& options,
                      int cancel_index = -1) {
  auto engine = Engine::create(model, options);
  std::vector<RequestHandle> handles(specs.size(), 0);
  std::vector<int> streamed(specs.size(), 0);
  for (int step = 0;; ++step) {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].arrive_at_step != step) continue;
      Request r;
      r.prompt_tokens = specs[i].prompt;
      r.sampler = specs[i].sampler;
      r.generate = gen_options(specs[i].max_tokens);
      r.on_token = [&, i](const TokenEvent& e) {
        if (e.token >= 0) ++streamed[i];
        if (int(i) == cancel_index && streamed[i] == 3) engine->cancel(handles[i]);
        return Continue;
      };
      handles[i] = engine->submit(std::move(r));
    }
    const int32_t n = engine->step();
    const bool all_in = step >= 11;
    if (all_in && engine->pending() == 0) break;
    REQUIRE((n > 0 || engine->pending() > 0 || !all_in));
    REQUIRE(step < 5000);
  }
  RunOutcome out;
  for (size_t i = 0; i < specs.size(); ++i) {
    out.results.push_back(engine->result(handles[i]));
    if (out.results.back().stop_reason != StopReason::cancelled)
      CHECK(streamed[i] == int(out.results.back().tokens.size()));
  }
  out.metrics = engine->metrics();
  return out;
}

}  // namespace

TEST_CASE("engine, greedy: each of 16 mixed requests gets exactly its tokens alone", "[engine]") {
  auto model = test::gemma();
  const auto specs = mix(*model, false);
  const RunOutcome run = run_engine(model, specs, {});
  for (size_t i = 0; i < specs.size(); ++i) {
    INFO("request " << i << ", prompt " << specs[i].prompt.size() << " tokens");
    CHECK(run.results[i].state == RequestState::finished);
    CHECK(run.results[i].stop_reason == StopReason::max_tokens);
    CHECK(run.results[i].tokens == alone(model, specs[i]));
  }
  // Several requests really shared steps.
  CHECK(run.metrics.mean_batch_tokens > 4.0);
  CHECK(run.metrics.requests_finished == 16);
  CHECK(run.metrics.time_to_first_token.count == 16);
  CHECK(run.metrics.preemptions == 0);
}

TEST_CASE("engine, seeded sampling: each request gets what the sequential run with its seed gets", "[engine]") {
  auto model = test::gemma();
  const auto specs = mix(*model, true);
  const EngineOptions options{.max_batch_size = 8, .max_batch_tokens = 128, .prefill_chunk_size = 48};
  const RunOutcome run = run_engine(model, specs, options);
  for (size_t i = 0; i < specs.size(); ++i) {
    INFO("request " << i);
    CHECK(run.results[i].tokens == alone(model, specs[i], options));
  }
}

TEST_CASE("engine: cancelling one request leaves the others' outputs unchanged", "[engine]") {
  auto model = test::gemma();
  auto specs = mix(*model, false);
  specs[5].max_tokens = 40;
  const RunOutcome run = run_engine(model, specs, {}, 5);
  CHECK(run.results[5].stop_reason == StopReason::cancelled);
  CHECK(run.results[5].tokens.size() < 40);
  CHECK(run.results[5].tokens.size() >= 3);
  const auto whole = alone(model, specs[5]);
  CHECK(std::equal(run.results[5].tokens.begin(), run.results[5].tokens.end(), whole.begin()));
  for (size_t i = 0; i < specs.size(); ++i) {
    if (i == 5) continue;
    INFO("request " << i);
    CHECK(run.results[i].tokens == alone(model, specs[i]));
  }
  CHECK(run.metrics.requests_cancelled == 1);
}

TEST_CASE("engine: a pool too small for all requests preempts, recomputes and loses nothing", "[engine]") {
  // 720 tokens of pool (45 pages per layer) for 16 requests that need ~1,900 together.
  auto model = Model::load(test::real_model_path(), {.threads = 2, .kv_pool_tokens = 720});
  auto specs = mix(*model, false);
  for (Spec& s : specs) {
    if (s.prompt.size() > 200) s.prompt.resize(200);
    s.arrive_at_step = 0;
    s.max_tokens = 40;
  }
  const RunOutcome run = run_engine(model, specs, {});
  CHECK(run.metrics.preemptions > 0);
  int preempted = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    INFO("request " << i << ", preempted " << run.results[i].preemptions << " times");
    preempted += run.results[i].preemptions > 0;
    CHECK(run.results[i].state == RequestState::finished);
    CHECK(run.results[i].stop_reason == StopReason::max_tokens);
    CHECK(run.results[i].tokens == alone(model, specs[i]));
  }
  CHECK(preempted > 0);
  CHECK(model->kv_memory().pages_used == 0);
}

TEST_CASE("engine: prompts with a common prefix share its KV pages", "[engine]") {
  auto model = test::gemma();
  const std::string system = passage(120) + ".\n";
  std::vector<Spec> specs;
  for (int i = 0; i < 6; ++i) {
    Spec s;
    s.prompt = model->tokenize(system + "Question " + std::to_string(i) + ": what happened next?", true);
    s.arrive_at_step = i == 0 ? 0 : 1;
    s.max_tokens = 8;
    s.sampler = {.temperature = 0.0f};
    specs.push_back(s);
  }
  const RunOutcome run = run_engine(model, specs, {});
  CHECK(run.metrics.prefix_hit_tokens > 0);
  CHECK(run.metrics.prefix_hit_rate > 0.5);
  for (size_t i = 0; i < specs.size(); ++i) {
    INFO("request " << i);
    if (i > 0) CHECK(run.results[i].cached_prompt_tokens >= 100);
    CHECK(run.results[i].tokens == alone(model, specs[i]));
  }
  // Without sharing the hit rate is zero and the outputs are the same.
  const RunOutcome plain = run_engine(model, specs, {.prefix_sharing = false});
  CHECK(plain.metrics.prefix_hit_tokens == 0);
  for (size_t i = 0; i < specs.size(); ++i) CHECK(plain.results[i].tokens == run.results[i].tokens);
}

TEST_CASE("engine: its own thread serves requests from other threads; wait() and on_done", "[engine]") {
  auto model = test::gemma();
  auto engine = Engine::create(model);
  engine->start();
  expect_error([&] { engine->step(); }, ErrorCode::invalid_argument, "own thread");
  std::atomic<int> done{0};
  std::vector<RequestHandle> handles(4);
  std::vector<std::thread> clients;
  const auto specs = mix(*model, false);
  for (int i = 0; i < 4; ++i)
    clients.emplace_back([&, i] {
      Request r;
      r.prompt_tokens = specs[size_t(i)].prompt;
      r.sampler = {.temperature = 0.0f};
      r.generate = gen_options(6);
      r.on_done = [&](const RequestResult& result) {
        CHECK(result.state == RequestState::finished);
        ++done;
      };
      handles[size_t(i)] = engine->submit(std::move(r));
    });
  for (auto& c : clients) c.join();
  for (int i = 0; i < 4; ++i) {
    const RequestResult r = engine->wait(handles[size_t(i)]);
    CHECK(r.tokens == alone(model, {specs[size_t(i)].prompt, 0, 6, {.temperature = 0.0f}}));
    CHECK(r.time_to_first_token > 0);
    CHECK(r.total_seconds >= r.time_to_first_token);
  }
  CHECK(done == 4);
  engine->stop();
  CHECK(engine->step() == 0);  // stepped by hand again once stopped
}

TEST_CASE("engine: bad input is rejected with its reason; shutdown cancels what is in flight", "[engine][errors]") {
  auto model = test::gemma();
  const auto bad_options = [&](EngineOptions o, const std::string& needle) {
    expect_error([&] { Engine::create(model, o); }, ErrorCode::invalid_argument, needle);
  };
  bad_options({.max_batch_size = 0}, "max_batch_size");
  bad_options({.max_batch_tokens = -1}, "max_batch_tokens");
  bad_options({.prefill_chunk_size = 0}, "prefill_chunk_size");
  bad_options({.max_waiting = 0}, "max_waiting");
  bad_options({.kv = {.max_tokens = 0}}, "max_tokens");
  bad_options({.slo_ttft_seconds = -1}, "slo_ttft_seconds");

  auto engine = Engine::create(model, {.kv = {.max_tokens = 64}});
  std::vector<std::string> reasons;
  auto submit = [&](Request r) {
    r.on_done = [&](const RequestResult& res) { reasons.push_back(res.error); };
    return engine->submit(std::move(r));
  };
  auto rejected = [&](RequestHandle h, const std::string& needle) {
    const RequestResult r = engine->result(h);
    CHECK(r.state == RequestState::rejected);
    CHECK_THAT(r.error, Catch::Matchers::Contains(needle));
  };
  rejected(submit({}), "empty");
  rejected(submit({.prompt = passage(200)}), "context holds 64");
  rejected(submit({.prompt_tokens = {2, int32_t(model->info().n_vocab)}}), "outside the vocabulary");
  rejected(submit({.prompt = "hi", .sampler = {.temperature = -1.0f}}), "temperature");
  Request neg;
  neg.prompt = "hi";
  neg.generate.max_tokens = -5;
  rejected(submit(neg), "max_tokens");
  CHECK(reasons.size() == 5);
  CHECK(engine->metrics().requests_rejected == 5);

  // A request larger than the whole pool.
  auto tiny = Model::load(test::real_model_path(), {.threads = 2, .kv_pool_tokens = 64});
  auto small = Engine::create(tiny);
  Request big;
  big.prompt = passage(100);
  big.generate.max_tokens = 200;
  const RequestHandle h = small->submit(big);
  CHECK(small->result(h).state == RequestState::rejected);
  CHECK_THAT(small->result(h).error, Catch::Matchers::Contains("whole pool"));

  // Unknown and finished handles.
  CHECK_FALSE(engine->cancel(987654));
  expect_error([&] { engine->result(987654); }, ErrorCode::invalid_argument, "unknown request handle");
  const RequestHandle quick = engine->submit({.prompt = "Hello", .sampler = {.temperature = 0.0f},
                                              .generate = gen_options(2)});
  while (engine->pending() > 0) engine->step();
  CHECK(engine->result(quick).state == RequestState::finished);
  CHECK_FALSE(engine->cancel(quick));
  CHECK(engine->release(quick));
  expect_error([&] { engine->result(quick); }, ErrorCode::invalid_argument, "unknown request handle");

  // wait() that nothing could end: on the thread that drives step() (no start()), and
  // from a request callback. Both throw instead of blocking; the request still runs.
  RequestHandle waiter = 0;
  bool callback_threw = false;
  Request stuck{.prompt = "Hello", .sampler = {.temperature = 0.0f}, .generate = gen_options(3)};
  stuck.on_token = [&](const TokenEvent&) {
    try {
      engine->wait(waiter);
    } catch (const Error& e) {
      callback_threw = e.code() == ErrorCode::invalid_argument;
    }
    return Control::proceed;
  };
  waiter = engine->submit(std::move(stuck));
  expect_error([&] { engine->wait(waiter); }, ErrorCode::invalid_argument, "drives step()");
  while (engine->pending() > 0) engine->step();
  CHECK(callback_threw);
  CHECK(engine->wait(waiter).state == RequestState::finished);  // ended: returns at once

  // Shutdown with requests in flight: each ends cancelled; later submissions are rejected.
  std::vector<RequestHandle> inflight;
  for (int i = 0; i < 3; ++i)
    inflight.push_back(engine->submit({.prompt = "Tell me a story", .generate = gen_options(30)}));
  engine->step();
  engine->step();
  engine->shutdown();
  for (RequestHandle x : inflight) {
    const RequestResult r = engine->result(x);
    CHECK(r.state == RequestState::finished);
    CHECK(r.stop_reason == StopReason::cancelled);
  }
  CHECK(engine->pending() == 0);
  rejected(engine->submit({.prompt = "late"}), "shut down");
  CHECK(model->kv_memory().pages_used == 0);
}

TEST_CASE("engine metrics: Prometheus text, JSON and alerts that fire once per crossing", "[engine][metrics]") {
  auto model = test::gemma();
  std::vector<Alert> alerts;
  EngineOptions options;
  options.slo_ttft_seconds = 1e-6;  // impossible: the alert must fire, once
  options.price_per_hour = 2.0;
  options.on_alert = [&](const Alert& a) { alerts.push_back(a); };
  auto specs = mix(*model, false);
  specs.resize(8);
  const RunOutcome run = run_engine(model, specs, options);
  (void)run;
  int ttft_events = 0;
  for (const Alert& a : alerts)
    if (a.name == "ttft_p99") {
      ++ttft_events;
      CHECK(a.firing);
      CHECK(a.threshold == Approx(1.5e-6));
      CHECK(a.value > a.threshold);
    }
  CHECK(ttft_events == 1);

  auto engine = Engine::create(model, options);
  const RequestHandle h = engine->submit({.prompt = "The sea", .sampler = {.temperature = 0.0f},
                                          .generate = gen_options(5)});
  while (engine->pending() > 0) engine->step();
  CHECK(engine->result(h).tokens.size() == 5);
  const EngineMetrics m = engine->metrics();
  CHECK(m.generated_tokens == 5);
  CHECK(m.requests_finished == 1);
  CHECK(m.end_to_end.count == 1);
  CHECK(m.time_per_output_token.count == 1);
  CHECK(m.time_per_output_token.p50 > 0);
  CHECK(m.cost_per_million_tokens > 0);
  CHECK(m.scheduler_seconds < m.busy_seconds);
  const std::string prom = engine->metrics_prometheus();
  for (const char* name : {"# TYPE ember_generated_tokens_total counter", "ember_generated_tokens_total 5",
                           "# TYPE ember_time_to_first_token_seconds histogram",
                           "ember_time_to_first_token_seconds_count 1", "ember_requests_finished_total 1",
                           "ember_kv_utilisation_ratio", "ember_prefix_cache_hit_ratio", "ember_preemptions_total 0"})
    CHECK_THAT(prom, Catch::Matchers::Contains(name));
  const std::string json = engine->metrics_json();
  CHECK_THAT(json, Catch::Matchers::Contains("\"ember_generated_tokens_total\":{\"type\":\"counter\""));
  CHECK_THAT(json, Catch::Matchers::Contains("\"p99\":"));
}


TEST_CASE("engine: INT8 and INT4 KV storage keep every request's tokens independent of the batch", "[engine]") {
  auto model = test::gemma();
  auto specs = mix(*model, false);
  specs.resize(6);
  for (KVStorage storage : {KVStorage::int8, KVStorage::int4}) {
    INFO(int(storage));
    const EngineOptions options{.kv = {.max_tokens = 2048, .storage = storage}};
    const RunOutcome run = run_engine(model, specs, options);
    for (size_t i = 0; i < specs.size(); ++i) {
      INFO("request " << i);
      CHECK(run.results[i].tokens == alone(model, specs[i], options));
    }
  }
}

TEST_CASE("engine: an INT4 cache with an exact window keeps every request's tokens as alone", "[engine]") {
  // Batching, chunked prefill and prefix sharing must not change what a request sees:
  // its newest 16 keys exact, the rest INT4 (KVCacheOptions::exact_recent).
  auto model = test::gemma();
  auto specs = mix(*model, false);
  specs.resize(6);
  const std::string system = passage(120) + ".\n";
  for (int i = 0; i < 3; ++i) {
    Spec s;
    s.prompt = model->tokenize(system + "Question " + std::to_string(i) + ": what happened next?", true);
    s.arrive_at_step = i;
    s.max_tokens = 8;
    s.sampler = {.temperature = 0.0f};
    specs.push_back(s);
  }
  const EngineOptions options{.kv = {.max_tokens = 2048, .storage = KVStorage::int4, .exact_recent = 16}};
  const RunOutcome run = run_engine(model, specs, options);
  for (size_t i = 0; i < specs.size(); ++i) {
    INFO("request " << i);
    CHECK(run.results[i].tokens == alone(model, specs[i], options));
  }
  // And a session of the same options generates the same tokens.
  auto s = model->new_session({.kv = options.kv, .batch_invariant = true});
  Sampler greedy(SamplerOptions{.temperature = 0.0f});
  CHECK(s->generate(specs[0].prompt, greedy, gen_options(specs[0].max_tokens)).tokens == run.results[0].tokens);
}

TEST_CASE("engine: a full context ends that request only; priorities; chat messages", "[engine]") {
  auto model = test::gemma();
  // Two requests in the same steps; one outgrows its 64-token context.
  auto engine = Engine::create(model, {.kv = {.max_tokens = 64}});
  Request big;
  big.prompt_tokens = model->tokenize(passage(30), true);
  REQUIRE(big.prompt_tokens.size() < 60);
  big.sampler.temperature = 0.0f;
  big.generate = gen_options(100);
  Request small;
  small.prompt = "The sea is";
  small.sampler.temperature = 0.0f;
  small.generate = gen_options(10);
  const RequestHandle hb = engine->submit(big), hs = engine->submit(small);
  while (engine->pending() > 0) engine->step();
  CHECK(engine->result(hb).stop_reason == StopReason::context_full);
  CHECK(int(big.prompt_tokens.size() + engine->result(hb).tokens.size()) == 64);
  CHECK(engine->result(hs).stop_reason == StopReason::max_tokens);
  CHECK(engine->result(hs).tokens == alone(model, {model->tokenize("The sea is", true), 0, 10, {.temperature = 0.0f}},
                                           {.kv = {.max_tokens = 64}}));

  // One sequence at a time: the higher priority runs first although submitted last.
  auto serial = Engine::create(model, {.max_batch_size = 1});
  std::vector<int> order;
  for (int priority : {0, 5}) {
    Request r;
    r.prompt = "Hello";
    r.priority = priority;
    r.generate = gen_options(2);
    r.on_done = [&order, priority](const RequestResult&) { order.push_back(priority); };
    serial->submit(std::move(r));
  }
  while (serial->pending() > 0) serial->step();
  CHECK(order == std::vector<int>{5, 0});

  // A chat request is rendered with the model's template.
  Request chat;
  chat.messages = {{"user", "Name a colour."}};
  chat.sampler.temperature = 0.0f;
  chat.generate = gen_options(4);
  const RequestHandle hc = serial->submit(chat);
  while (serial->pending() > 0) serial->step();
  const RequestResult rc = serial->result(hc);
  CHECK(rc.state == RequestState::finished);
  CHECK(rc.prompt_tokens == int32_t(model->tokenize(model->apply_chat_template(chat.messages), true, true).size()));
  CHECK(rc.tokens.size() == 4);
}
