// Speculative decoding under KV eviction (StreamingLLM, H2O) on the real model: with a
// small budget, so that a long generation evicts hundreds of times, the speculative
// tokens equal plain generation's (batch-invariant order, same eviction options),
// drafts are both kept and rejected, and the cache ends as plain generation leaves it
// (the next token's logits are the same bits).
#include <string>
#include <vector>

#include "real_model/real_model.hpp"

using namespace ember;

namespace {

// Code that repeats itself: prompt lookup finds drafts in the prompt and the output.
const std::string kCode =
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n\n"
    "def div(a, b):\n";

struct Run {
  GenerateResult result;
  std::vector<float> next_logits;  // after one more token: the cache as the generation left it
};

Run generate(const std::shared_ptr<Model>& model, const KVCacheOptions& kv, const SamplerOptions& so,
             SpeculativeOptions spec, int32_t max_tokens) {
  auto session = model->new_session({.kv = kv, .batch_invariant = true});
  Sampler sampler(so);
  GenerateOptions g;
  g.max_tokens = max_tokens;
  g.stop_at_end_of_generation = false;
  g.speculative = std::move(spec);
  Run run{session->generate(kCode, sampler, g), {}};
  REQUIRE(session->decode(run.result.tokens.front()) == Outcome::ok);  // the last sampled token and one more
  const auto logits = session->logits();
  run.next_logits.assign(logits.begin(), logits.end());
  return run;
}

// Every storage type with greedy prompt lookup (k = 8); F16 and INT4 also with a self
// draft and seeded sampling.
void check_policy(const std::shared_ptr<Model>& model, KVCacheOptions kv, int32_t max_tokens) {
  const SpeculativeOptions lookup{.kind = DraftKind::lookup, .draft_max = 8, .adaptive = false};
  const SpeculativeOptions self{.kind = DraftKind::self, .draft_max = 6, .self_vocab = 16384, .adaptive = false};
  const SamplerOptions greedy = Sampler::greedy().options();
  const SamplerOptions sampled{.temperature = 0.8f, .seed = 11};
  for (const KVStorage storage : {KVStorage::f16, KVStorage::int8, KVStorage::int4}) {
    kv.storage = storage;
    struct Case {
      SamplerOptions so;
      SpeculativeOptions spec;
      const char* name;
    };
    std::vector<Case> cases = {{greedy, lookup, "greedy, lookup k=8"}};
    if (storage != KVStorage::int8) cases.push_back({sampled, self, "sampled, self-vocab draft"});
    for (const Case& c : cases) {
      INFO("storage " << int(storage) << ", " << c.name);
      const Run plain = generate(model, kv, c.so, {}, max_tokens);
      const Run spec = generate(model, kv, c.so, c.spec, max_tokens);
      REQUIRE(plain.result.tokens.size() == size_t(max_tokens));
      CHECK(spec.result.tokens == plain.result.tokens);
      CHECK(spec.result.text == plain.result.text);
      CHECK(spec.result.speculative.accepted > 0);        // some drafts kept
      CHECK(spec.result.speculative.rejected_steps > 0);  // and some cut from the cache
      CHECK(spec.next_logits == plain.next_logits);       // the same cache afterwards
    }
  }
}

}  // namespace

TEST_CASE("speculative generation under StreamingLLM eviction equals plain generation", "[speculative][kv]") {
  auto model = test::gemma();
  // 4 sinks + 92: a 300-token generation after a 40-token prompt evicts about 250 times.
  check_policy(model, {.max_tokens = 1024, .eviction = KVEviction::streaming, .sinks = 4, .window = 92}, 300);
}

TEST_CASE("speculative generation under H2O eviction equals plain generation", "[speculative][kv]") {
  auto model = test::gemma();
  // 48 heavy hitters + 48 recent tokens: every step after the first 56 evicts by score.
  check_policy(model, {.max_tokens = 1024, .eviction = KVEviction::h2o, .heavy = 48, .recent = 48}, 300);
}

TEST_CASE("speculative requests under eviction in the Engine give the tokens of plain requests", "[speculative][kv]") {
  auto model = test::gemma();
  // Batches mix verification steps (placed token by token) with other requests' steps.
  const std::vector<std::string> prompts = {kCode, "Once upon a time, in a small village,", kCode + "    if b == 0:\n"};
  for (const KVCacheOptions& kv :
       {KVCacheOptions{.max_tokens = 1024, .eviction = KVEviction::streaming, .sinks = 4, .window = 60},
        KVCacheOptions{.max_tokens = 1024, .storage = KVStorage::int8, .eviction = KVEviction::h2o, .heavy = 32,
                       .recent = 32}}) {
    INFO("eviction " << int(kv.eviction));
    auto run_all = [&](const SpeculativeOptions& spec) {
      auto engine = Engine::create(model, {.kv = kv});
      return test::run_requests(*engine, prompts, [&](Request& r, size_t i) {
        r.sampler = i % 2 == 0 ? Sampler::greedy().options() : SamplerOptions{.temperature = 0.8f, .seed = 40 + i};
        r.generate.max_tokens = 160;
        r.generate.stop_at_end_of_generation = false;
        r.generate.speculative = spec;
      });
    };
    const auto [plain, plain_metrics] = run_all({});
    const auto [spec, metrics] = run_all({.kind = DraftKind::lookup, .draft_max = 8, .adaptive = false});
    CHECK(spec == plain);
    CHECK(metrics.accepted_tokens > 0);
    CHECK(metrics.accepted_tokens < metrics.draft_tokens);
  }
}
