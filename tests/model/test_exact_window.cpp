// The exact window of a quantized KV cache (KVCacheOptions::exact_recent) on the golden
// random-weight models: a window as long as the context gives the F16 cache's logits;
// a token's logits do not depend on how its sequence was cut into steps; sessions fork,
// save, load and rewind through it; speculative decoding keeps plain decoding's output.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "common/expect_error.hpp"
#include "common/paths.hpp"
#include "ember/ember.hpp"

using namespace ember;

namespace {

// llama: full attention; gemma3: sliding-window layers (window 8 in its golden file or
// whatever it holds) and a softcap-free GQA; qwen3: per-head norms.
const char* const kModels[] = {"llama-Q8_0", "gemma3-Q8_0", "qwen3-Q8_0"};

std::shared_ptr<Model> golden(const std::string& name) {
  return Model::load(test::golden_dir() / (name + ".gguf"), {.threads = 2});
}

std::vector<int32_t> prompt_of(int32_t n, int32_t n_vocab) {
  std::vector<int32_t> p = {1};
  for (int32_t i = 1; i < n; ++i) p.push_back((i * 37 + 11) % n_vocab);
  return p;
}

// Logits of every token of `tokens` evaluated in steps of `chunk` (then one decode per
// token after `prefill` tokens).
std::vector<float> logits_of(const std::shared_ptr<Model>& model, const KVCacheOptions& kv,
                             std::span<const int32_t> tokens, int32_t chunk, size_t prefill) {
  auto s = model->new_session({.kv = kv, .prefill_chunk_size = chunk, .batch_invariant = true});
  std::vector<float> all = s->evaluate(tokens.first(prefill));
  REQUIRE(all.size() == prefill * size_t(model->info().n_vocab));
  for (size_t i = prefill; i < tokens.size(); ++i) {
    REQUIRE(s->decode(tokens[i]) == Outcome::ok);
    all.insert(all.end(), s->logits().begin(), s->logits().end());
  }
  return all;
}

float max_abs(const std::vector<float>& a) {
  float m = 0.0f;
  for (float x : a) m = std::max(m, std::abs(x));
  return m;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

bool present(const std::string& name) {
  if (std::filesystem::exists(test::golden_dir() / (name + ".gguf"))) return true;
  WARN("SKIPPED: " << name << " is absent from " << test::golden_dir());
  return false;
}

}  // namespace

TEST_CASE("an exact window as long as the context gives an F16 cache's logits", "[exact_window]") {
  // These random-weight models are sensitive: F16 rows alone move their logits by about
  // 1 % of the largest (against F32 rows). A window over every token must do no worse
  // than an F16 cache, and the quantized cache without it clearly worse.
  for (const char* name : kModels) {
    if (!present(name)) continue;
    INFO(name);
    auto model = golden(name);
    const std::vector<int32_t> tokens = prompt_of(40, int32_t(model->info().n_vocab));
    const auto f32 = logits_of(model, {.max_tokens = 128, .storage = KVStorage::f32}, tokens, 16, 30);
    const auto f16 = logits_of(model, {.max_tokens = 128}, tokens, 16, 30);
    const auto plain = logits_of(model, {.max_tokens = 128, .storage = KVStorage::int4}, tokens, 16, 30);
    const auto whole =
        logits_of(model, {.max_tokens = 128, .storage = KVStorage::int4, .exact_recent = 64}, tokens, 16, 30);
    INFO("from F32 rows: F16 " << max_diff(f32, f16) << ", INT4 " << max_diff(f32, plain) << ", INT4 with the window "
                               << max_diff(f32, whole));
    CHECK(max_diff(f32, whole) <= 1.5f * max_diff(f32, f16));
    CHECK(max_diff(f32, plain) > 3.0f * max_diff(f32, whole));
    // The first token sees only itself, whose value row the window holds in F16.
    const size_t v = size_t(model->info().n_vocab);
    CHECK(std::equal(f16.begin(), f16.begin() + long(v), whole.begin()));
  }
}

TEST_CASE("with an exact window a token's logits do not depend on the steps its sequence was cut into",
          "[exact_window]") {
  for (const char* name : kModels) {
    if (!present(name)) continue;
    INFO(name);
    auto model = golden(name);
    const std::vector<int32_t> tokens = prompt_of(48, int32_t(model->info().n_vocab));
    for (const int32_t recent : {1, 4, 9}) {
      INFO("exact_recent " << recent);
      const KVCacheOptions kv{.max_tokens = 128, .storage = KVStorage::int4, .exact_recent = recent};
      const auto one_step = logits_of(model, kv, tokens, 64, 40);
      const auto by_token = logits_of(model, kv, tokens, 1, 40);
      const auto by_seven = logits_of(model, kv, tokens, 7, 40);
      const float scale = max_abs(one_step);
      CHECK(max_diff(one_step, by_token) <= 1e-5f * scale);
      CHECK(max_diff(one_step, by_seven) <= 1e-5f * scale);
      // The window changes what the tokens see: different logits from the plain cache
      // (and, below, from a wider window).
      const auto plain = logits_of(model, {.max_tokens = 128, .storage = KVStorage::int4}, tokens, 64, 40);
      CHECK(max_diff(one_step, plain) > 1e-3f * scale);
    }
    const auto w4 = logits_of(model, {.max_tokens = 128, .storage = KVStorage::int4, .exact_recent = 4}, tokens, 64, 40);
    const auto w9 = logits_of(model, {.max_tokens = 128, .storage = KVStorage::int4, .exact_recent = 9}, tokens, 64, 40);
    CHECK(max_diff(w4, w9) > 1e-3f * max_abs(w4));
  }
}

TEST_CASE("sessions with an exact window fork, save, load and rewind exactly", "[exact_window]") {
  for (const char* name : kModels) {
    if (!present(name)) continue;
    INFO(name);
    auto model = golden(name);
    const std::vector<int32_t> tokens = prompt_of(44, int32_t(model->info().n_vocab));
    const KVCacheOptions kv{.max_tokens = 128, .storage = KVStorage::int4, .exact_recent = 6};
    const SessionOptions so{.kv = kv, .batch_invariant = true};
    const std::span<const int32_t> all(tokens);
    // The reference: the whole sequence in one session, its last 8 tokens decoded.
    auto ref = model->new_session(so);
    REQUIRE(ref->prefill(all.first(36)) == Outcome::ok);
    std::vector<std::vector<float>> expected;
    for (size_t i = 36; i < tokens.size(); ++i) {
      REQUIRE(ref->decode(tokens[i]) == Outcome::ok);
      expected.emplace_back(ref->logits().begin(), ref->logits().end());
    }
    auto continue_from = [&](Session& s) {
      for (size_t i = size_t(s.position()); i < tokens.size(); ++i) {
        REQUIRE(s.decode(tokens[i]) == Outcome::ok);
        CHECK(std::equal(s.logits().begin(), s.logits().end(), expected[i - 36].begin()));
      }
    };
    // The window's memory: its pages at F16, a fixed count however long the context.
    const KVSessionMemory mem = ref->kv_memory();
    CHECK(mem.tokens == 44);
    CHECK(mem.exact_pages > 0);
    CHECK(mem.exact_pages <= model->info().n_layer * 3);  // 6 + a page of 16 tokens, over at most 3 pages
    CHECK(mem.exact_bytes == size_t(mem.exact_pages) * 16 * model->info().n_head_kv * model->info().head_dim * 2 * 2);
    // A fork after 36 tokens.
    auto a = model->new_session(so);
    REQUIRE(a->prefill(all.first(36)) == Outcome::ok);
    auto forked = a->fork();
    continue_from(*forked);
    // A state saved after 38 tokens, loaded into a new session.
    auto b = model->new_session(so);
    REQUIRE(b->prefill(all.first(36)) == Outcome::ok);
    REQUIRE(b->decode(tokens[36]) == Outcome::ok);
    REQUIRE(b->decode(tokens[37]) == Outcome::ok);
    const std::string state = b->save_state();
    auto c = model->new_session(so);
    c->load_state(state);
    continue_from(*c);
    // A rewind inside the last page (what speculative decoding does with rejected drafts).
    auto d = model->new_session(so);
    REQUIRE(d->prefill(all.first(36)) == Outcome::ok);
    REQUIRE(d->decode(tokens[36]) == Outcome::ok);
    REQUIRE(d->decode(5) == Outcome::ok);
    REQUIRE(d->decode(6) == Outcome::ok);
    d->rewind(37);
    continue_from(*d);
    // A state saved without a window (a session with none) loads into one with it: the
    // window is refilled from the quantized rows, so logits differ a little, not a lot.
    auto e = model->new_session({.kv = {.max_tokens = 128, .storage = KVStorage::int4}, .batch_invariant = true});
    REQUIRE(e->prefill(all.first(38)) == Outcome::ok);
    auto f = model->new_session(so);
    f->load_state(e->save_state());
    REQUIRE(f->decode(tokens[38]) == Outcome::ok);
    std::vector<float> got(f->logits().begin(), f->logits().end());
    CHECK(max_diff(got, expected[2]) < 0.2f * max_abs(expected[2]));
  }
}

TEST_CASE("speculative decoding with an exact window keeps plain decoding's output", "[exact_window][speculative]") {
  for (const char* name : kModels) {
    if (!present(name)) continue;
    INFO(name);
    auto model = golden(name);
    std::vector<int32_t> prompt = {1};
    for (int r = 0; r < 4; ++r)
      for (int32_t t : {11, 23, 5, 48, 97, 31, 7}) prompt.push_back(t % int32_t(model->info().n_vocab));
    auto run = [&](DraftKind kind) {
      auto s = model->new_session(
          {.kv = {.max_tokens = 256, .storage = KVStorage::int4, .exact_recent = 5}, .batch_invariant = true});
      Sampler sampler(SamplerOptions{.temperature = 0.0f});
      GenerateOptions g;
      g.max_tokens = 40;
      g.stop_at_end_of_generation = false;
      g.speculative.kind = kind;
      return s->generate(prompt, sampler, g);
    };
    const GenerateResult plain = run(DraftKind::none);
    const GenerateResult lookup = run(DraftKind::lookup);
    CHECK(lookup.speculative.accepted > 0);
    CHECK(lookup.tokens == plain.tokens);
  }
}

TEST_CASE("bad exact-window options are typed errors", "[exact_window][errors]") {
  if (!present("llama-Q8_0")) return;
  auto model = golden("llama-Q8_0");
  test::expect_error([&] { model->new_session({.kv = {.storage = KVStorage::int4, .exact_recent = -1}}); },
                     ErrorCode::invalid_argument, "exact_recent must be in [0, 4096]");
  test::expect_error([&] { model->new_session({.kv = {.storage = KVStorage::int4, .exact_recent = 5000}}); },
                     ErrorCode::invalid_argument, "exact_recent must be in [0, 4096]");
  test::expect_error(
      [&] {
        model->new_session(
            {.kv = {.storage = KVStorage::int4, .eviction = KVEviction::streaming, .exact_recent = 8}});
      },
      ErrorCode::invalid_argument, "needs eviction none");
  // F16 rows are exact already: the option is accepted and changes nothing.
  const std::vector<int32_t> tokens = prompt_of(20, int32_t(model->info().n_vocab));
  const auto f16 = logits_of(model, {.max_tokens = 64}, tokens, 8, 16);
  const auto with = logits_of(model, {.max_tokens = 64, .exact_recent = 8}, tokens, 8, 16);
  CHECK(f16 == with);
}

TEST_CASE("the engine shares a prompt prefix only where the exact window still holds it", "[exact_window][engine]") {
  // A request whose prompt starts like another's may take that one's KV pages (prefix
  // sharing). With an exact window that is only right while the donor's window still
  // holds the prefix's newest tokens in F16; else the request computes its prompt
  // itself. Either way its log-probabilities are those it gets alone.
  if (!present("llama-Q8_0")) return;
  auto model = golden("llama-Q8_0");
  const auto n_vocab = int32_t(model->info().n_vocab);
  const std::vector<int32_t> prefix = prompt_of(60, n_vocab);
  auto with = [&](std::vector<int32_t> p, std::initializer_list<int32_t> tail) {
    p.insert(p.end(), tail);
    return p;
  };
  std::vector<int32_t> far = prefix;  // the donor runs 40 tokens past the prefix
  for (int32_t i = 0; i < 40; ++i) far.push_back((i * 13 + 5) % n_vocab);
  const EngineOptions options{.prefill_chunk_size = 256,
                              .kv = {.max_tokens = 256, .storage = KVStorage::int4, .exact_recent = 6}};
  struct Out {
    std::vector<std::vector<float>> logprobs;
    EngineMetrics metrics;
    std::vector<int32_t> cached;
  };
  // Submits each prompt one step after the previous; greedy, 6 tokens each.
  auto run = [&](const std::vector<std::vector<int32_t>>& prompts) {
    auto engine = Engine::create(model, options);
    Out out;
    out.logprobs.resize(prompts.size());
    std::vector<RequestHandle> handles;
    for (size_t i = 0; i < prompts.size(); ++i) {
      Request r;
      r.prompt_tokens = prompts[i];
      r.sampler = {.temperature = 0.0f};
      r.generate.max_tokens = 6;
      r.generate.stop_at_end_of_generation = false;
      r.logprobs = true;
      r.on_token = [&out, i](const TokenEvent& e) {
        if (e.token >= 0) out.logprobs[i].push_back(e.logprob);
        return Control::proceed;
      };
      handles.push_back(engine->submit(std::move(r)));
      engine->step();
    }
    while (engine->pending() > 0) engine->step();
    for (RequestHandle h : handles) out.cached.push_back(engine->result(h).cached_prompt_tokens);
    out.metrics = engine->metrics();
    return out;
  };
  // Far: the donor's window has moved past the prefix, so nothing is shared.
  const std::vector<int32_t> late = with(prefix, {7, 8, 9});
  const Out far_run = run({far, late});
  const Out late_alone = run({late});
  CHECK(far_run.cached[1] == 0);
  CHECK(far_run.logprobs[1] == late_alone.logprobs[0]);
  // Near: the donor is the prefix plus 3 tokens; its window holds the prefix's end.
  const std::vector<int32_t> near = with(prefix, {3, 4, 5});
  const Out near_run = run({near, late});
  CHECK(near_run.cached[1] > 0);
  CHECK(near_run.logprobs[1] == late_alone.logprobs[0]);
}
