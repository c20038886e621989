// ember::Sampler: options check, history, and the chain of sampling/*.hpp steps.
#include "ember/sampler.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <new>
#include <random>
#include <vector>

#include "common/fail.hpp"
#include "sampling/candidates.hpp"
#include "sampling/draw.hpp"
#include "sampling/filters.hpp"
#include "sampling/penalties.hpp"
#include "sampling/rng.hpp"

namespace ember {

namespace {

using sampling::Candidates;

void validate(const SamplerOptions& o) {
  require(std::isfinite(o.temperature) && o.temperature >= 0.0f,
          "SamplerOptions.temperature must be finite and >= 0 (0 = greedy), got {}", o.temperature);
  require(o.top_k >= 0, "SamplerOptions.top_k must be >= 0 (0 = off), got {}", o.top_k);
  require(o.top_p > 0.0f && o.top_p <= 1.0f, "SamplerOptions.top_p must be in (0, 1] (1 = off), got {}", o.top_p);
  require(o.min_p >= 0.0f && o.min_p <= 1.0f, "SamplerOptions.min_p must be in [0, 1] (0 = off), got {}", o.min_p);
  require(std::isfinite(o.repetition_penalty) && o.repetition_penalty > 0.0f,
          "SamplerOptions.repetition_penalty must be finite and > 0 (1 = off), got {}", o.repetition_penalty);
  require(std::isfinite(o.frequency_penalty), "SamplerOptions.frequency_penalty must be finite (0 = off), got {}",
          o.frequency_penalty);
  require(std::isfinite(o.presence_penalty), "SamplerOptions.presence_penalty must be finite (0 = off), got {}",
          o.presence_penalty);
  require(o.penalty_last_n >= -1,
          "SamplerOptions.penalty_last_n must be >= -1 (-1 = whole history, 0 = off), got {}", o.penalty_last_n);
  for (size_t i = 0; i < o.logit_bias.size(); ++i) {
    const auto& [token, bias] = o.logit_bias[i];
    require(token >= 0, "SamplerOptions.logit_bias[{}]: token must be >= 0, got {}", i, token);
    require(std::isfinite(bias), "SamplerOptions.logit_bias[{}]: the bias of token {} must be finite, got {}", i,
            token, bias);
  }
  for (size_t i = 0; i < o.banned_tokens.size(); ++i)
    require(o.banned_tokens[i] >= 0, "SamplerOptions.banned_tokens[{}] must be >= 0, got {}", i,
            o.banned_tokens[i]);
}

// The largest token id the options name (bias or ban), -1 when none.
int32_t max_listed_token(const SamplerOptions& o) {
  int32_t most = -1;
  for (const auto& entry : o.logit_bias) most = std::max(most, entry.first);
  for (const int32_t token : o.banned_tokens) most = std::max(most, token);
  return most;
}

// fill_top_candidates() (a heap of the k best) is used when k is at most 1/8 of
// the vocabulary; for larger k a selection over the full set is cheaper.
constexpr size_t kHeapTopKFactor = 8;

// 64 bits from the system's entropy source. Where std::random_device cannot be
// opened, falls back to the clock: kRandomSeed asks for "some seed", and a sampler
// that cannot start would be worse than a predictable one.
uint64_t draw_random_seed() {
  try {
    std::random_device device;
    const uint64_t high = device();
    const uint64_t low = device();
    return (high << 32) ^ low;
  } catch (const std::exception&) {
    uint64_t counter = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    return sampling::splitmix64_next(counter);
  }
}

// Working buffers of sample(), kept between calls to avoid reallocating
// vocabulary-sized arrays per token. Copies start empty: they hold no state.
struct Scratch {
  Candidates candidates;        // survivors of the filters
  std::vector<float> penalized;  // [n_vocab] logits after penalties
  std::vector<float> weights;    // [n_candidates] draw weights

  Scratch() = default;
  Scratch(const Scratch&) {}
  Scratch& operator=(const Scratch&) { return *this; }
  Scratch(Scratch&&) = default;
  Scratch& operator=(Scratch&&) = default;
};

}  // namespace

struct Sampler::Impl {
  Impl(const SamplerOptions& o, uint64_t resolved_seed)
      : options(o),
        seed(resolved_seed),
        penalties{o.repetition_penalty, o.frequency_penalty, o.presence_penalty},
        penalties_on(penalties.active() && o.penalty_last_n != 0),
        rng(resolved_seed),
        history(penalties_on ? o.penalty_last_n : 0),
        max_listed(max_listed_token(o)) {}

  SamplerOptions options;
  uint64_t seed;                   // the seed in use: options.seed, or the one drawn for kRandomSeed
  sampling::PenaltyParams penalties;
  bool penalties_on;               // penalties can change a logit and the window is not empty
  sampling::Rng rng;
  sampling::TokenHistory history;  // empty when penalties are off: nothing reads it
  int32_t max_listed;              // largest id in logit_bias / banned_tokens, -1 when both are empty
  Scratch scratch;
};

Sampler::Sampler(const SamplerOptions& options) {
  validate(options);
  const uint64_t seed = options.seed == kRandomSeed ? draw_random_seed() : options.seed;
  impl_ = std::make_unique<Impl>(options, seed);
}

Sampler::~Sampler() = default;
Sampler::Sampler(const Sampler& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Sampler& Sampler::operator=(const Sampler& other) {
  if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}
Sampler::Sampler(Sampler&& other) noexcept = default;
Sampler& Sampler::operator=(Sampler&& other) noexcept = default;

Sampler Sampler::greedy() {
  SamplerOptions options;
  options.temperature = 0.0f;
  options.top_k = 0;
  options.top_p = 1.0f;
  options.min_p = 0.0f;
  options.repetition_penalty = 1.0f;
  options.frequency_penalty = 0.0f;
  options.presence_penalty = 0.0f;
  options.penalty_last_n = 0;
  options.seed = 0;  // never used: greedy draws nothing
  return Sampler(options);
}

int32_t Sampler::sample(std::span<const float> logits) {
  Impl& s = *impl_;
  try {
    std::span<const float> source = logits;
    if (s.history.size() > 0 || s.max_listed >= 0) {
      sampling::check_logits_size(logits);
      const int32_t max_token = s.history.max_token();
      require(static_cast<size_t>(max_token + 1) <= logits.size(),
              "Sampler::sample: accepted token {} is outside the vocabulary of {} logits", max_token, logits.size());
      require(static_cast<size_t>(s.max_listed + 1) <= logits.size(),
              "Sampler::sample: token {} of logit_bias or banned_tokens is outside the vocabulary of {} logits",
              s.max_listed, logits.size());
      s.scratch.penalized.assign(logits.begin(), logits.end());
      std::vector<float>& work = s.scratch.penalized;
      for (const auto& [token, bias] : s.options.logit_bias) work[size_t(token)] += bias;
      if (s.history.size() > 0) sampling::apply_penalties(work, s.history.counts(), s.penalties);
      for (const int32_t token : s.options.banned_tokens) work[size_t(token)] = -INFINITY;
      source = work;  // NaN and +inf pass the penalties unchanged and are rejected below
    }

    // Greedy: the filters never remove the top-ranked token, so they cannot change
    // the argmax; skip them and the whole candidate set.
    if (s.options.temperature == 0.0f) return sampling::argmax(source);

    Candidates& candidates = s.scratch.candidates;
    // A small top-k is fused with building the set: the vocabulary is scanned once
    // and only the k best are ever stored. Likewise min-p when it is the first
    // filter that cuts (no top-k, top-p off). Both give exactly the result of the
    // plain steps, which then find nothing left to remove.
    const size_t top_k = static_cast<size_t>(s.options.top_k);
    if (top_k > 0 && top_k * kHeapTopKFactor <= source.size()) {
      sampling::fill_top_candidates(source, s.options.top_k, candidates);
    } else if (top_k == 0 && s.options.top_p >= 1.0f && s.options.min_p > 0.0f) {
      sampling::fill_min_p_candidates(source, s.options.min_p, candidates);
    } else {
      sampling::fill_candidates(source, candidates);
      sampling::apply_top_k(candidates, s.options.top_k);
    }
    sampling::apply_top_p(candidates, s.options.top_p);
    sampling::apply_min_p(candidates, s.options.min_p);

    // The generator advances only once nothing can fail any more.
    sampling::Rng rng = s.rng;
    const double u = rng.uniform();
    const size_t index = sampling::draw_index(candidates, s.options.temperature, u, s.scratch.weights);
    s.rng = rng;
    return candidates.items[index].id;
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::out_of_memory, "Sampler::sample: out of memory for {} logits", logits.size());
  }
}

void Sampler::accept(int32_t token) {
  require(token >= 0, "Sampler::accept: token must be >= 0, got {}", token);
  try {
    impl_->history.push(token);
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::out_of_memory, "Sampler::accept: out of memory for the token history");
  }
}

void Sampler::accept(std::span<const int32_t> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i)
    require(tokens[i] >= 0, "Sampler::accept: tokens[{}] must be >= 0, got {}", i, tokens[i]);
  // Build the new history on a copy, so that running out of memory half-way
  // leaves the old one intact.
  try {
    sampling::TokenHistory history = impl_->history;
    for (const int32_t token : tokens) history.push(token);
    impl_->history = std::move(history);
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::out_of_memory, "Sampler::accept: out of memory for the token history");
  }
}

void Sampler::reset() {
  impl_->history.clear();
  impl_->rng = sampling::Rng(impl_->seed);
}

const SamplerOptions& Sampler::options() const noexcept { return impl_->options; }
uint64_t Sampler::seed() const noexcept { return impl_->seed; }

}  // namespace ember
