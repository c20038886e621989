// Speculative decoding on the golden random-weight models of every architecture:
// the tokens of plain decoding for each draft source, greedy and sampled; prompt
// lookup's matching; and a statistical check that speculative sampling follows the
// model's distribution, which a deliberately wrong acceptance rule fails.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "common/paths.hpp"
#include "ember/ember.hpp"
#include "runtime/speculative.hpp"

using namespace ember;

namespace {

std::shared_ptr<Model> golden(const std::string& name) {
  return Model::load(test::golden_dir() / (name + ".gguf"), {.threads = 2});
}

// A prompt that repeats itself, so that lookup proposes drafts.
std::vector<int32_t> repeating_prompt(int32_t n_vocab) {
  std::vector<int32_t> p = {1};
  for (int r = 0; r < 4; ++r)
    for (int32_t t : {11, 23, 5, 48, 97, 31, 7})
      p.push_back(t % n_vocab);
  return p;
}

GenerateResult run(const std::shared_ptr<Model>& model, std::span<const int32_t> prompt, const SamplerOptions& so,
                   const SpeculativeOptions& spec, int32_t n, const KVCacheOptions& kv = {.max_tokens = 256}) {
  auto session = model->new_session({.kv = kv, .batch_invariant = true});
  Sampler sampler(so);
  GenerateOptions g;
  g.max_tokens = n;
  g.stop_at_end_of_generation = false;
  g.speculative = spec;
  return session->generate(prompt, sampler, g);
}

}  // namespace

TEST_CASE("prompt lookup proposes what followed the latest earlier match", "[speculative]") {
  const std::vector<int32_t> ctx = {1, 2, 3, 9, 1, 2, 3, 8, 4, 1, 2, 3};
  CHECK(runtime::lookup_draft(ctx, 3, 3, 1) == std::vector<int32_t>{8, 4, 1});  // the latest "1 2 3" first
  CHECK(runtime::lookup_draft(ctx, 9, 3, 1) == std::vector<int32_t>{8, 4, 1, 2, 3});
  const std::vector<int32_t> none = {5, 6, 7};
  CHECK(runtime::lookup_draft(none, 4, 3, 1).empty());
  const std::vector<int32_t> one = {5, 6, 5};
  CHECK(runtime::lookup_draft(one, 2, 3, 1) == std::vector<int32_t>{6, 5});  // falls back to a 1-gram
  CHECK(runtime::lookup_draft(one, 2, 3, 2).empty());
}

TEST_CASE("speculative output equals plain output on every golden architecture", "[speculative]") {
  // llama-Q4_0: matrices repacked at load on AVX2 (self drafts read the file's rows through Weights::plain).
  for (const char* name : {"llama-Q8_0", "llama-Q4_0", "qwen2-Q8_0", "qwen3-Q8_0", "gemma3-Q4_K_M"}) {
    if (!std::filesystem::exists(test::golden_dir() / (std::string(name) + ".gguf"))) {
      WARN("SKIPPED: " << name << " is absent from " << test::golden_dir());
      continue;
    }
    auto model = golden(name);
    const auto prompt = repeating_prompt(int32_t(model->info().n_vocab));
    for (const SamplerOptions& so : {Sampler::greedy().options(), SamplerOptions{.temperature = 1.0f, .seed = 5}}) {
      const GenerateResult plain = run(model, prompt, so, {}, 24);
      const int n_layer = model->info().n_layer;
      for (const SpeculativeOptions& spec :
           {SpeculativeOptions{.kind = DraftKind::lookup, .draft_max = 5, .adaptive = false},
            SpeculativeOptions{.kind = DraftKind::model, .draft_model = model, .adaptive = false},
            SpeculativeOptions{.kind = DraftKind::self, .self_layers = {0}, .self_vocab = 256, .adaptive = false},
            SpeculativeOptions{.kind = DraftKind::self, .self_lowbit = true, .adaptive = true}}) {
        INFO(name << ": draft kind " << int(spec.kind) << ", temperature " << so.temperature << ", " << n_layer
                  << " layers");
        const GenerateResult r = run(model, prompt, so, spec, 24);
        CHECK(r.tokens == plain.tokens);
        CHECK(r.speculative.accepted <= r.speculative.drafted);
      }
    }
  }
}

TEST_CASE("speculative output equals plain output under KV eviction on every golden architecture",
          "[speculative][kv]") {
  // llama-Q4_0: matrices repacked at load on AVX2 (self drafts read the file's rows through Weights::plain).
  for (const char* name : {"llama-Q8_0", "llama-Q4_0", "qwen2-Q8_0", "qwen3-Q8_0", "gemma3-Q4_K_M"}) {
    if (!std::filesystem::exists(test::golden_dir() / (std::string(name) + ".gguf"))) {
      WARN("SKIPPED: " << name << " is absent from " << test::golden_dir());
      continue;
    }
    auto model = golden(name);
    const auto prompt = repeating_prompt(int32_t(model->info().n_vocab));
    // Budgets of 16 cells: 64 tokens after a 29-token prompt evict at every step.
    for (const KVCacheOptions& kv :
         {KVCacheOptions{.max_tokens = 256, .eviction = KVEviction::streaming, .sinks = 3, .window = 13},
          KVCacheOptions{.max_tokens = 256, .storage = KVStorage::int4, .eviction = KVEviction::h2o, .heavy = 8,
                         .recent = 8}}) {
      for (const SamplerOptions& so : {Sampler::greedy().options(), SamplerOptions{.temperature = 1.0f, .seed = 5}}) {
        const GenerateResult plain = run(model, prompt, so, {}, 64, kv);
        for (const SpeculativeOptions& spec :
             {SpeculativeOptions{.kind = DraftKind::lookup, .draft_max = 8, .adaptive = false},
              SpeculativeOptions{.kind = DraftKind::self, .self_layers = {0}, .self_vocab = 256, .adaptive = false}}) {
          INFO(name << ": eviction " << int(kv.eviction) << ", draft kind " << int(spec.kind) << ", temperature "
                    << so.temperature);
          const GenerateResult r = run(model, prompt, so, spec, 64, kv);
          CHECK(r.tokens == plain.tokens);
          CHECK(r.speculative.drafted > 0);
        }
      }
    }
  }
}

namespace {

// Pearson's chi-square statistic of two samples over the same categories
// (homogeneity), and its degrees of freedom (categories seen minus one).
std::pair<double, int> chi_square(const std::map<int32_t, int>& a, const std::map<int32_t, int>& b) {
  std::map<int32_t, std::pair<int, int>> all;
  int na = 0, nb = 0;
  for (const auto& [t, c] : a) all[t].first = c, na += c;
  for (const auto& [t, c] : b) all[t].second = c, nb += c;
  double chi = 0.0;
  for (const auto& [t, c] : all) {
    const double total = c.first + c.second;
    const double ea = total * na / (na + nb), eb = total * nb / (na + nb);
    chi += (c.first - ea) * (c.first - ea) / ea + (c.second - eb) * (c.second - eb) / eb;
  }
  return {chi, int(all.size()) - 1};
}

// Upper quantile of chi-square at p = 0.001 (Wilson-Hilferty approximation).
double chi_square_critical(int dof) {
  const double z = 3.090;  // the standard normal's 0.999 quantile
  const double k = dof;
  return k * std::pow(1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k)), 3.0);
}

}  // namespace

TEST_CASE("speculative sampling follows the model's distribution; a wrong acceptance rule does not",
          "[speculative][statistics]") {
  auto model = golden("llama-Q8_0");
  // A prompt holding every token once (a fixed shuffle), so that whatever token is
  // sampled first, prompt lookup proposes its successor in the prompt as the draft
  // of the second one. The test compares the distribution of that second token over
  // many seeds, sampled plainly and speculatively.
  const auto n_vocab = int32_t(model->info().n_vocab);
  std::vector<int32_t> prompt = {1};
  for (int32_t i = 0; i < n_vocab - 2; ++i) prompt.push_back(2 + (i * 389) % (n_vocab - 2));  // 389 is prime
  std::map<int32_t, int> plain, spec, wrong;
  const SpeculativeOptions lookup{.kind = DraftKind::lookup, .draft_max = 1, .lookup_max_ngram = 1,
                                  .adaptive = false};
  constexpr int kSeeds = 800;
  auto options = [](uint64_t seed) {
    // A low temperature concentrates the random model's distribution on a few tokens.
    return SamplerOptions{.temperature = 0.25f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = seed};
  };
  // The prompt is evaluated once; every run continues a fork of it.
  auto base = model->new_session({.kv = {.max_tokens = 1024}, .batch_invariant = true});
  REQUIRE(base->prefill(prompt) == Outcome::ok);
  auto session_run = [&](const SamplerOptions& so, const SpeculativeOptions& spec) {
    auto session = base->fork();
    Sampler sampler(so);
    GenerateOptions g;
    g.max_tokens = 3;  // a draft for the second token is worth proposing only when a third may follow
    g.stop_at_end_of_generation = false;
    g.speculative = spec;
    return session->generate(std::span<const int32_t>(), sampler, g);
  };
  int64_t drafted = 0;
  for (int seed = 0; seed < kSeeds; ++seed) {
    ++plain[session_run(options(uint64_t(seed)), {}).tokens[1]];
    // Other seeds for the speculative sample: equal seeds give equal tokens by
    // construction, which would prove nothing statistical.
    const GenerateResult r = session_run(options(uint64_t(seed) + 1000003), lookup);
    drafted += r.speculative.drafted;
    ++spec[r.tokens[1]];
    // The wrong rule: keep the draft without asking the model (a verifier that
    // skipped its check). The draft is the first token's successor in the prompt.
    const int32_t first = r.tokens[0];
    const auto at = std::find(prompt.begin(), prompt.end(), first);
    ++wrong[at + 1 < prompt.end() ? *(at + 1) : r.tokens[1]];
  }
  CHECK(drafted >= kSeeds / 2);  // the drafts were there to be judged
  const auto [chi, dof] = chi_square(plain, spec);
  const auto [chi_wrong, dof_wrong] = chi_square(plain, wrong);
  INFO("right rule: chi-square " << chi << " on " << dof << " dof (critical " << chi_square_critical(dof)
                                 << "); wrong rule: " << chi_wrong << " on " << dof_wrong << " (critical "
                                 << chi_square_critical(dof_wrong) << ")");
  REQUIRE(dof >= 3);
  CHECK(chi < chi_square_critical(dof));
  CHECK(chi_wrong > chi_square_critical(dof_wrong));
}

TEST_CASE("a draft model larger than the target is allowed, with a warning", "[speculative]") {
  std::vector<std::string> warnings;
  ModelOptions options{.threads = 1};
  options.log = [&](LogLevel level, std::string_view message) {
    if (level == LogLevel::warning) warnings.emplace_back(message);
  };
  auto target = Model::load(test::golden_dir() / "llama-Q4_0.gguf", options);
  auto draft = golden("llama-F16");  // same vocabulary, four times the weight bytes
  REQUIRE(draft->info().weight_bytes > target->info().weight_bytes);
  const auto prompt = repeating_prompt(int32_t(target->info().n_vocab));
  const GenerateResult plain = run(target, prompt, Sampler::greedy().options(), {}, 12);
  const GenerateResult r = run(target, prompt, Sampler::greedy().options(),
                               {.kind = DraftKind::model, .draft_model = draft, .adaptive = false}, 12);
  CHECK(r.tokens == plain.tokens);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Matchers::Contains("more weight bytes"));
}

TEST_CASE("the adaptive policy estimates acceptance per draft and pauses only when drafting loses",
          "[speculative][policy]") {
  using runtime::DraftPolicy;
  CHECK(DraftPolicy::expected_tokens(0.8, 4) == Approx((1.0 - std::pow(0.8, 5)) / 0.2));
  CHECK(DraftPolicy::expected_tokens(1.0, 4) == 5.0);
  CHECK(DraftPolicy::expected_tokens(0.0, 4) == 1.0);

  SpeculativeOptions o{.kind = DraftKind::lookup, .draft_max = 8, .adaptive = true, .probe_interval = 5};
  DraftPolicy p(o);
  CHECK(p.next_k() == 0);  // the first step is plain: it measures a token's cost
  p.after_plain(0.010);
  CHECK(p.next_k() == 4);
  // The first verification is not costed (warm-up), however slow.
  p.after_verify(4, 4, 0.5, 0.5);
  CHECK(p.next_k() == 5);
  p.after_verify(5, 5, 0.005, 0.015);
  CHECK(p.next_k() == 6);
  // Measured: 1 ms a draft token, a 6-token verification 1.5 plain steps (slope 0.1),
  // every draft kept: 4 drafts yield 5 tokens for 4 ms + 14 ms against 10 ms a token.
  CHECK(p.gain(4) == Approx(5.0 * 0.010 / (4 * 0.001 + 0.010 * 1.4)));
  // Early rejections in long drafts: 1 of 6 kept, twice. As accepted / drafted (0.17)
  // the acceptance would fall below min_acceptance and shorten k; per draft (kept
  // drafts over kept drafts plus rejections) it stays high and k stays.
  p.after_verify(6, 1, 0.005, 0.016);
  p.after_verify(6, 1, 0.005, 0.016);
  CHECK(p.next_k() == 6);
  CHECK_FALSE(p.paused());
  // Rejected drafts until the policy pauses (at most 20 steps); the steps it took.
  const auto reject_until_paused = [&](double draft_seconds) {
    int steps = 0;
    while (!p.paused() && steps++ < 20) p.after_verify(p.next_k(), 0, draft_seconds, 0.016);
    return steps;
  };
  // A pause of `tokens` plain steps, then a probe from draft_min.
  const auto expect_pause_of = [&](int tokens) {
    for (int i = 0; i < tokens; ++i) {
      CHECK(p.next_k() == 0);
      p.after_plain(0.010);
    }
    CHECK(p.next_k() == o.draft_min);
  };
  // Drafts that are always rejected at a cost above a plain step's: shorter k, then a
  // pause of probe_interval plain tokens, then a probe from draft_min.
  const int steps = reject_until_paused(0.004);
  REQUIRE(p.paused());
  CHECK(steps < 20);
  expect_pause_of(5);
  // The probe fails too: the next pause is twice as long.
  reject_until_paused(0.004);
  REQUIRE(p.paused());
  expect_pause_of(10);
  // A free source scored while paused (prompt lookup): misses keep the pause, four
  // hits in a row end it at the next plain step, long before its 20 tokens.
  reject_until_paused(0.0);
  REQUIRE(p.paused());
  for (int i = 0; i < 3; ++i) {
    p.after_shadow(false);
    p.after_plain(0.010);
  }
  CHECK(p.paused());
  for (int i = 0; i < 4; ++i) {
    CHECK(p.paused());
    p.after_shadow(true);
    p.after_plain(0.010);
  }
  CHECK_FALSE(p.paused());
  CHECK(p.next_k() == o.draft_min);
}
