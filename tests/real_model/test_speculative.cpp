// Speculative decoding on the real model: lossless (the tokens of plain decoding in
// the same sum order, greedy and sampled, for every draft source), the draft model's
// vocabulary check, bad options and the metrics (under KV eviction:
// test_speculative_eviction.cpp).
#include <string>
#include <vector>

#include "common/expect_error.hpp"
#include "real_model/real_model.hpp"

using namespace ember;

namespace {

// A prompt whose continuation repeats what it has seen: prompt lookup finds drafts.
const std::string kRepetitive =
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n\n"
    "def div(a, b):\n";

GenerateResult generate(const std::shared_ptr<Model>& model, const std::string& prompt, const SamplerOptions& so,
                        GenerateOptions go) {
  auto session = model->new_session({.kv = {.max_tokens = 1024}, .batch_invariant = true});
  Sampler sampler(so);
  return session->generate(prompt, sampler, go);
}

SamplerOptions greedy() { return Sampler::greedy().options(); }

GenerateOptions with(SpeculativeOptions spec, int32_t max_tokens = 48) {
  GenerateOptions g;
  g.max_tokens = max_tokens;
  g.stop_at_end_of_generation = false;
  g.speculative = std::move(spec);
  return g;
}

}  // namespace

TEST_CASE("prompt lookup gives the tokens of plain decoding, greedy and sampled", "[speculative]") {
  auto model = test::gemma();
  for (const SamplerOptions& so : {greedy(), SamplerOptions{.temperature = 0.8f, .seed = 7},
                                   SamplerOptions{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f,
                                                  .repetition_penalty = 1.3f, .seed = 99}}) {
    INFO("temperature " << so.temperature << ", seed " << so.seed);
    const GenerateResult plain = generate(model, kRepetitive, so, with({}));
    for (bool adaptive : {false, true}) {
      const GenerateResult spec = generate(
          model, kRepetitive, so, with({.kind = DraftKind::lookup, .draft_max = 6, .adaptive = adaptive}));
      INFO("adaptive " << adaptive);
      CHECK(spec.tokens == plain.tokens);
      CHECK(spec.text == plain.text);
      CHECK(spec.stop_reason == plain.stop_reason);
      CHECK(spec.speculative.drafted > 0);
      CHECK(spec.speculative.accepted <= spec.speculative.drafted);
      if (so.temperature == 0.0f) CHECK(spec.speculative.accepted > 0);
    }
  }
}

TEST_CASE("a draft model gives the tokens of plain decoding", "[speculative]") {
  auto model = test::gemma();
  // The model itself as its draft: the vocabularies agree and most drafts pass.
  auto draft = Model::load(test::real_model_path(), {.threads = 2});
  const std::string prompt = "The three primary colours are";
  const GenerateResult plain = generate(model, prompt, greedy(), with({}, 32));
  SpeculativeOptions spec{.kind = DraftKind::model, .draft_model = draft, .draft_max = 4, .adaptive = false};
  const GenerateResult r = generate(model, prompt, greedy(), with(spec, 32));
  CHECK(r.tokens == plain.tokens);
  CHECK(r.speculative.steps > 0);
  CHECK(r.speculative.acceptance_rate() > 0.8);
  CHECK(r.speculative.mean_accepted_per_step() > 3.0);
  // Sampled, with a stop string: still the plain tokens.
  const SamplerOptions sampled{.temperature = 0.9f, .seed = 1234};
  GenerateOptions g = with(spec, 40);
  g.stop_strings = {"."};
  GenerateOptions g_plain = with({}, 40);
  g_plain.stop_strings = {"."};
  const GenerateResult a = generate(model, prompt, sampled, g_plain);
  const GenerateResult b = generate(model, prompt, sampled, g);
  CHECK(b.tokens == a.tokens);
  CHECK(b.text == a.text);
  CHECK(b.stop_reason == a.stop_reason);
}

TEST_CASE("the model's own cheaper drafts give the tokens of plain decoding", "[speculative]") {
  auto model = test::gemma();
  const std::string prompt = "Once upon a time, in a small village,";
  const SamplerOptions sampled{.temperature = 0.7f, .seed = 21};
  for (const SamplerOptions& so : {greedy(), sampled}) {
    const GenerateResult plain = generate(model, prompt, so, with({}, 40));
    for (const SpeculativeOptions& spec :
         {SpeculativeOptions{.kind = DraftKind::self, .self_vocab = 16384, .adaptive = false},
          SpeculativeOptions{.kind = DraftKind::self, .self_layers = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},
                             .adaptive = false},
          SpeculativeOptions{.kind = DraftKind::self, .self_vocab = 4096, .self_lowbit = true, .adaptive = false}}) {
      INFO("vocab " << spec.self_vocab << ", layers " << spec.self_layers.size() << ", lowbit " << spec.self_lowbit
                    << ", temperature " << so.temperature);
      const GenerateResult r = generate(model, prompt, so, with(spec, 40));
      CHECK(r.tokens == plain.tokens);
      CHECK(r.speculative.drafted > 0);
    }
  }
  // The reduced vocabulary keeps most of the model's greedy choices on plain prose.
  const GenerateResult v = generate(model, prompt, greedy(),
                                    with({.kind = DraftKind::self, .self_vocab = 16384, .adaptive = false}, 64));
  CHECK(v.speculative.acceptance_rate() > 0.4);
}

// Verification steps of up to 9 tokens: a quantized cache's attention must sum each of
// them as a one-token step does (batch-invariant order), whatever the step's size.
TEST_CASE("rejected drafts leave INT8 and INT4 caches as plain decoding leaves them", "[speculative]") {
  auto model = test::gemma();
  for (const KVStorage storage : {KVStorage::int8, KVStorage::int4}) {
    INFO("storage " << int(storage));
    const auto run = [&](SpeculativeOptions spec) {
      auto session = model->new_session({.kv = {.max_tokens = 1024, .storage = storage}, .batch_invariant = true});
      Sampler sampler(greedy());
      return session->generate(kRepetitive, sampler, with(std::move(spec), 64));
    };
    const GenerateResult plain = run({});
    int64_t rejected = 0;
    for (const SpeculativeOptions& spec :
         {SpeculativeOptions{.kind = DraftKind::lookup, .draft_max = 8, .adaptive = false},
          SpeculativeOptions{.kind = DraftKind::self, .draft_max = 6, .self_vocab = 16384, .adaptive = false}}) {
      const GenerateResult r = run(spec);
      CHECK(r.tokens == plain.tokens);
      CHECK(r.speculative.accepted > 0);
      rejected += r.speculative.rejected_steps;
    }
    CHECK(rejected > 0);  // some drafts were rolled back from the quantized cache
  }
}

TEST_CASE("a reduced draft vocabulary takes in the tokens of its context", "[speculative]") {
  auto model = test::gemma();
  // 256 static rows hold short pieces only ("def", "return", " add" are not among
  // them); the prompt's own tokens join the draft's vocabulary, so drafts of a
  // continuation that repeats the prompt's words pass.
  const GenerateResult plain = generate(model, kRepetitive, greedy(), with({}, 32));
  const GenerateResult r =
      generate(model, kRepetitive, greedy(), with({.kind = DraftKind::self, .self_vocab = 256, .adaptive = false}, 32));
  CHECK(r.tokens == plain.tokens);
  CHECK(r.speculative.drafted > 0);
  CHECK(r.speculative.acceptance_rate() > 0.5);
}

TEST_CASE("drafts that are always wrong cost little with adaptive k", "[speculative]") {
  auto model = test::gemma();
  // Random-looking text: lookup finds 1-grams but their continuations are rejected.
  const std::string prompt = "qz xv 81 jw qz pk 93 mv qz rt 27 xv lb qz";
  const GenerateResult plain = generate(model, prompt, greedy(), with({}, 48));
  const GenerateResult r = generate(
      model, prompt, greedy(), with({.kind = DraftKind::lookup, .draft_max = 8, .adaptive = true, .probe_interval = 8}, 48));
  CHECK(r.tokens == plain.tokens);
  CHECK(r.speculative.plain_steps > 0);  // the policy measured plain steps and paused drafting
}

TEST_CASE("bad speculative options are errors that change nothing", "[speculative][errors]") {
  auto model = test::gemma();
  auto session = model->new_session({.kv = {.max_tokens = 1024}});
  Sampler g = Sampler::greedy();
  auto bad = [&](SpeculativeOptions spec, const std::string& needle) {
    test::expect_error([&] { session->generate("Hello", g, with(spec)); }, ErrorCode::invalid_argument, needle);
    CHECK(session->position() == 0);
  };
  bad({.kind = DraftKind::lookup, .draft_max = 0}, "draft_max");
  bad({.kind = DraftKind::lookup, .draft_max = 17}, "draft_max");
  bad({.kind = DraftKind::lookup, .draft_max = 4, .draft_min = 5}, "draft_min");
  bad({.kind = DraftKind::lookup, .draft_p_min = 2.0f}, "draft_p_min");
  bad({.kind = DraftKind::lookup, .lookup_max_ngram = 2, .lookup_min_ngram = 3}, "n-grams");
  bad({.kind = DraftKind::model}, "draft_model is empty");
  // A draft model with another vocabulary: the golden llama model (512 tokens).
  auto other = Model::load(test::golden_dir() / "llama-Q8_0.gguf", {.threads = 1});
  bad({.kind = DraftKind::model, .draft_model = other}, "vocabulary has 512 tokens");
  bad({.kind = DraftKind::self}, "needs self_layers");
  bad({.kind = DraftKind::self, .self_layers = {3, 2}}, "ascend");
  bad({.kind = DraftKind::self, .self_layers = {0, 18}}, "not a layer");
  bad({.kind = DraftKind::self, .self_vocab = 100}, "self_vocab");
  auto vocab_only = Model::load(test::real_model_path(), {.threads = 1, .vocab_only = true});
  bad({.kind = DraftKind::model, .draft_model = vocab_only}, "vocab_only");
}

TEST_CASE("speculative requests in the Engine give the tokens of plain requests", "[speculative][engine]") {
  auto model = test::gemma();
  const std::vector<std::string> prompts = {kRepetitive, "Once upon a time, in a small village,",
                                            "The three primary colours are", kRepetitive + "    if b == 0:\n"};
  auto run_all = [&](const SpeculativeOptions& spec) {
    auto engine = Engine::create(model, {.kv = {.max_tokens = 1024}});
    return test::run_requests(*engine, prompts, [&](Request& r, size_t i) {
      r.sampler = i % 2 == 0 ? greedy() : SamplerOptions{.temperature = 0.8f, .seed = 40 + i};
      r.generate = with(spec, 32);
    });
  };
  const auto [plain, plain_metrics] = run_all({});
  CHECK(plain_metrics.draft_tokens == 0);
  for (const SpeculativeOptions& spec :
       {SpeculativeOptions{.kind = DraftKind::lookup, .draft_max = 6, .adaptive = false},
        SpeculativeOptions{.kind = DraftKind::self, .self_vocab = 16384, .adaptive = true}}) {
    const auto [out, metrics] = run_all(spec);
    CHECK(out == plain);
    CHECK(metrics.draft_tokens > 0);
    CHECK(metrics.accepted_tokens > 0);
    CHECK(metrics.acceptance_rate > 0.0);
  }
  // A bad speculative option rejects the request with the reason.
  auto engine = Engine::create(model);
  Request bad;
  bad.prompt = "Hello";
  bad.generate.speculative = {.kind = DraftKind::lookup, .draft_max = 99};
  const RequestResult r = engine->result(engine->submit(bad));
  CHECK(r.state == RequestState::rejected);
  CHECK_THAT(r.error, Catch::Matchers::Contains("draft_max"));
}
