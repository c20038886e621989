// What a host sees of each generated token (id, text, log-probability), logit bias
// and bans on the real model, and the resources a model holds (threads, KV memory).
#include <cmath>
#include <string>
#include <vector>

#include "real_model/real_model.hpp"

using namespace ember;

namespace {

// log softmax(logits)[token], computed in double.
double log_softmax_at(std::span<const float> logits, int32_t token) {
  double most = -INFINITY;
  for (const float v : logits) most = std::max(most, double(v));
  double sum = 0;
  for (const float v : logits) sum += std::exp(double(v) - most);
  return double(logits[size_t(token)]) - most - std::log(sum);
}

}  // namespace

TEST_CASE("the token callback sees each token's id, text and log-probability", "[session][events]") {
  auto model = test::gemma();
  const std::string prompt = "The three primary colours are";
  auto session = model->new_session({.kv = {.max_tokens = 256}});
  Sampler sampler = Sampler::greedy();
  std::vector<TokenEvent> events;
  std::string streamed;
  const GenerateResult r =
      session->generate(prompt, sampler, {.max_tokens = 12, .stop_at_end_of_generation = false, .logprobs = true},
                        Session::TokenEventCallback([&](const TokenEvent& e) {
                          events.push_back({e.token, {}, e.logprob});
                          streamed += e.text;
                          return Continue;
                        }));
  REQUIRE(r.tokens.size() == 12);
  // One event per token, in order, then possibly one with the text held back at the end.
  REQUIRE(events.size() >= r.tokens.size());
  for (size_t i = 0; i < r.tokens.size(); ++i) CHECK(events[i].token == r.tokens[i]);
  for (size_t i = r.tokens.size(); i < events.size(); ++i) CHECK(events[i].token == -1);
  CHECK(streamed == r.text);

  // The log-probabilities are the model's own: replay the context and compute them here.
  auto replay = model->new_session({.kv = {.max_tokens = 256}});
  REQUIRE(replay->prefill(prompt) == Outcome::ok);
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    const double expected = log_softmax_at(replay->logits(), r.tokens[i]);
    CHECK(events[i].logprob <= 0.0f);
    CHECK(std::abs(double(events[i].logprob) - expected) < 1e-3);
    REQUIRE(replay->decode(r.tokens[i]) == Outcome::ok);
  }

  // Without logprobs the field is NaN (nothing computed).
  auto plain = model->new_session({.kv = {.max_tokens = 256}});
  Sampler g = Sampler::greedy();
  bool all_nan = true;
  plain->generate(prompt, g, {.max_tokens = 3}, Session::TokenEventCallback([&](const TokenEvent& e) {
                    all_nan = all_nan && std::isnan(e.logprob);
                    return Continue;
                  }));
  CHECK(all_nan);
}

TEST_CASE("banned tokens and logit bias steer generation on the real model", "[session][events]") {
  auto model = test::gemma();
  const std::string prompt = "The three primary colours are";
  auto base = model->new_session({.kv = {.max_tokens = 256}});
  Sampler g = Sampler::greedy();
  const auto first = base->generate(prompt, g, {.max_tokens = 1, .stop_at_end_of_generation = false}).tokens;
  REQUIRE(first.size() == 1);

  SamplerOptions banned = Sampler::greedy().options();
  banned.banned_tokens = {first[0]};
  Sampler b(banned);
  auto s1 = model->new_session({.kv = {.max_tokens = 256}});
  const auto other = s1->generate(prompt, b, {.max_tokens = 1, .stop_at_end_of_generation = false}).tokens;
  REQUIRE(other.size() == 1);
  CHECK(other[0] != first[0]);

  // A large bias on a token forces it (here: the BOS-free id of " banana").
  const auto banana = model->tokenize(" banana");
  REQUIRE(!banana.empty());
  SamplerOptions biased = Sampler::greedy().options();
  biased.logit_bias = {{banana[0], 100.0f}};
  Sampler bb(biased);
  auto s2 = model->new_session({.kv = {.max_tokens = 256}});
  CHECK(s2->generate(prompt, bb, {.max_tokens = 1, .stop_at_end_of_generation = false}).tokens[0] == banana[0]);
}
