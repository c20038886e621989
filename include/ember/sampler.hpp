// ember::Sampler: turns a row of logits into the next token.
//
// One sample() runs a fixed chain over the logits of the whole vocabulary:
//
//   logit bias -> penalties -> banned tokens -> top-k -> top-p -> min-p -> temperature -> draw
//
// Penalties act on the raw logits of tokens seen in the recent history. The three
// filters then remove unlikely tokens, judged at temperature 1, so the set of
// tokens that may be drawn does not depend on the temperature. Temperature only
// reshapes the distribution over the survivors before one token is drawn with a
// seeded generator of ember's own, which gives the same tokens for the same seed and
// inputs on every platform. docs/sampling.md explains the order and each step.
//
// Candidates are ranked by logit, highest first; among equal logits the lower token
// id ranks first. top-k and top-p cut this ranking, so ties at a cut are resolved in
// favour of the lower ids, and greedy sampling returns the lowest id among the
// tokens with the highest (penalised) logit.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "ember/export.hpp"

namespace ember {

// SamplerOptions::seed value asking for a seed from std::random_device; the seed
// actually used is reported by Sampler::seed().
inline constexpr uint64_t kRandomSeed = ~0ull;

// Settings of a Sampler; the defaults give a common chat setup. A filter at its
// "off" value does nothing and costs nothing.
struct SamplerOptions {
  // Softmax temperature: probabilities are proportional to exp(logit / temperature).
  // 0 = greedy (argmax after penalties; filters skipped, no random draw). Default 0.8; finite, >= 0.
  float temperature = 0.8f;
  // Keep only the top_k highest-ranked tokens (ties at the cut: lower ids kept). 0 = off. Default 40; >= 0.
  int top_k = 40;
  // Keep the smallest ranked prefix whose probability (at temperature 1, renormalised over the survivors of
  // top-k) sums to >= top_p, the token that crosses it included. 1 = off. Default 0.95; in (0, 1].
  float top_p = 0.95f;
  // Keep tokens whose probability is >= min_p times that of the most likely token (at temperature 1).
  // 0 = off. Default 0.05; in [0, 1].
  float min_p = 0.05f;
  // CTRL-style repetition penalty for tokens seen in the window: positive logits are divided by it,
  // negative ones multiplied. 1 = off, > 1 discourages repeats. Default 1; finite, > 0.
  float repetition_penalty = 1.0f;
  // Subtracted from a token's logit once per occurrence in the window (logit units per occurrence).
  // 0 = off, negative encourages repeats. Default 0; finite.
  float frequency_penalty = 0.0f;
  // Subtracted once from the logit of every token that occurs in the window (logit units).
  // 0 = off, negative encourages repeats. Default 0; finite.
  float presence_penalty = 0.0f;
  // How many of the most recently accepted tokens the penalties look at (tokens).
  // 0 = no penalties, -1 = the whole history. Default 64; >= -1.
  int penalty_last_n = 64;
  // Seed of the random generator: equal seeds and inputs give equal tokens. kRandomSeed = take one from
  // std::random_device. Default kRandomSeed; any value.
  uint64_t seed = kRandomSeed;
  // Added to the logits of the given tokens before everything else (token id, logit
  // units; a token listed twice gets both). Default none; ids >= 0, values finite.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Tokens that are never picked (their logits become -inf after the penalties).
  // Default none; ids >= 0. Banning every token makes sample() throw.
  std::vector<int32_t> banned_tokens;
};

// Picks tokens from logits. A Sampler belongs to one sequence: it keeps the tokens
// accepted so far (for the penalties) and the state of its random generator.
//
// Copying a Sampler copies its history and generator state, so the copy continues
// with exactly the tokens the original would have drawn (useful to fork a
// sequence). A moved-from Sampler may only be assigned to or destroyed.
// A Sampler is not safe to use from two threads at once; distinct Samplers are.
class EMBER_API Sampler {
 public:
  // Validates the options; throws ember::Error(invalid_argument) naming the first
  // field out of range and its value.
  explicit Sampler(const SamplerOptions& options = {});
  ~Sampler();
  Sampler(const Sampler& other);
  Sampler& operator=(const Sampler& other);
  Sampler(Sampler&& other) noexcept;
  Sampler& operator=(Sampler&& other) noexcept;

  // Argmax sampling: temperature 0, all filters and penalties off. A new value.
  static Sampler greedy();

  // Picks a token id in [0, logits.size()) from the logits of one position,
  // [n_vocab] f32. A logit of -inf marks a token that must not be picked. Uses the
  // accepted history for the penalties but does not add the result to it: call
  // accept() with the token actually used. With temperature > 0, each call consumes
  // exactly one number from the generator.
  // Throws ember::Error(invalid_argument) when the logits are empty, contain NaN or
  // +inf, are all -inf (after the bans), or when an accepted, biased or banned token
  // is outside [0, logits.size());
  // the Sampler is then unchanged.
  int32_t sample(std::span<const float> logits);

  // Records a token of the sequence (prompt or generated) for the penalties.
  // Throws ember::Error(invalid_argument) for a negative id.
  void accept(int32_t token);
  // Records several tokens in order, e.g. the prompt. All ids are checked before
  // any is recorded.
  void accept(std::span<const int32_t> tokens);

  // Forgets the history and restarts the generator from seed(), so the Sampler
  // behaves exactly as it did when it was constructed.
  void reset();

  // The options as given to the constructor.
  const SamplerOptions& options() const noexcept;
  // The seed in use: options().seed, or the value drawn when it was kRandomSeed.
  uint64_t seed() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember
