#include "runtime/generation.hpp"

#include <algorithm>

#include "common/fail.hpp"
#include "runtime/model_impl.hpp"

namespace ember::runtime {
namespace {

double seconds_between(Generation::Clock::time_point a, Generation::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// log p(token) = logit - log(sum exp(logits)), computed around the maximum.
float log_probability(std::span<const float> logits, int32_t token) {
  const float top = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(double(l - top));
  return float(double(logits[size_t(token)] - top) - std::log(sum));
}

}  // namespace

Generation::Generation(Sequence& sequence, Sampler& sampler, const GenerateOptions& options, TokenSink on_token,
                       std::span<const int32_t> prompt, bool logprobs)
    : seq_(sequence),
      sampler_(sampler),
      options_(options),
      on_token_(std::move(on_token)),
      logprobs_(logprobs || options.logprobs),
      tokenizer_(sequence.model_impl().require_tokenizer()),
      decoder_(tokenizer_),
      filter_(options.stop_strings),
      prompt_(prompt.begin(), prompt.end()),
      start_(Clock::now()) {
  require(options.max_tokens >= 0 && options.max_tokens <= (1 << 24),
          "GenerateOptions::max_tokens must be in [0, 2^24], got {}", options.max_tokens);
  for (int32_t t : options.stop_tokens)
    require(t >= 0 && t < tokenizer_.n_vocab(), "stop token {} is outside the vocabulary [0, {})", t,
            tokenizer_.n_vocab());
  if (prompt.empty() && seq_.tokens().empty())
    fail(ErrorCode::invalid_argument, "generate: the prompt is empty and the session holds no tokens");
  prompt_start_ = seq_.tokens().size();
  seq_.append(prompt);
  seq_.make_logits_pending();
  result_.metrics.prompt_tokens = int32_t(seq_.n_pending());
  decode_start_ = start_;
}

void Generation::after_step(const StepPart& part) {
  if (done_) return;
  seq_.finish_part(part);
  switch (part.status) {
    case StepStatus::ok: break;
    case StepStatus::cancelled:
      if (!prompt_done_) {
        // Prompt chunks evaluated before the cancellation stay; the rest is dropped.
        seq_.drop_pending(std::max(prompt_start_, seq_.n_evaluated()));
        result_.metrics.prefill_seconds = seconds_between(start_, Clock::now());
      }
      finish(StopReason::cancelled);
      return;
    case StepStatus::cache_full:
      if (!prompt_done_) {
        // The prompt does not fit: the context goes back to what it was.
        seq_.rewind(std::min(prompt_start_, seq_.tokens().size()));
        result_.metrics.prefill_seconds = seconds_between(start_, Clock::now());
      }
      finish(StopReason::context_full);
      return;
  }
  if (!seq_.logits_valid()) return;  // more of the context to evaluate first
  if (!prompt_done_) {
    prompt_done_ = true;
    sampler_.accept(prompt_);
    const auto now = Clock::now();
    result_.metrics.prefill_seconds = seconds_between(start_, now);
    decode_start_ = now;
  }
  sample_next();
}

void Generation::sample_next() { sample_from(seq_.logits(), seq_.tokens().size(), true); }

std::optional<int32_t> Generation::sample_from(std::span<const float> logits, size_t context, bool append) {
  if (done_) return std::nullopt;
  if (result_.metrics.generated_tokens >= options_.max_tokens) {
    finish(StopReason::max_tokens);
    return std::nullopt;
  }
  if (!seq_.evicts() && context >= size_t(seq_.capacity())) {
    finish(StopReason::context_full);
    return std::nullopt;
  }
  const int32_t token = sampler_.sample(logits);
  if (result_.metrics.generated_tokens == 0)
    result_.metrics.time_to_first_token = seconds_between(start_, Clock::now());
  if (std::find(options_.stop_tokens.begin(), options_.stop_tokens.end(), token) != options_.stop_tokens.end()) {
    finish(StopReason::stop_token);
    return std::nullopt;
  }
  if (options_.stop_at_end_of_generation && tokenizer_.is_end_of_generation(token)) {
    finish(StopReason::end_of_generation);
    return std::nullopt;
  }
  const float logprob = logprobs_ ? log_probability(logits, token) : std::numeric_limits<float>::quiet_NaN();
  sampler_.accept(token);
  if (append) {
    const int32_t one[1] = {token};
    seq_.append(one);  // pending until the next step
  }
  result_.tokens.push_back(token);
  ++result_.metrics.generated_tokens;
  emit(token, filter_.push(decoder_.push(token)), logprob);
  if (filter_.stopped()) {
    finish(StopReason::stop_string);
  } else if (callback_stopped_) {
    finish(StopReason::callback);
  } else if (result_.metrics.generated_tokens == options_.max_tokens) {
    // The last token is not evaluated: nothing would read its logits.
    finish(StopReason::max_tokens);
  }
  return token;
}

void Generation::emit(int32_t token, const std::string& text, float logprob) {
  result_.text += text;
  if (on_token_ && !callback_stopped_ && on_token_(TokenEvent{token, text, logprob}) == Control::stop)
    callback_stopped_ = true;
}

void Generation::finish(StopReason reason) {
  if (done_) return;
  done_ = true;
  result_.stop_reason = reason;
  if (!filter_.stopped()) {
    const std::string tail = filter_.push(decoder_.flush()) + filter_.flush();
    if (callback_stopped_) {
      result_.text += tail;
    } else if (!tail.empty()) {
      emit(-1, tail, std::numeric_limits<float>::quiet_NaN());
    }
  }
  result_.metrics.decode_seconds = prompt_done_ ? seconds_between(decode_start_, Clock::now()) : 0.0;
}

}  // namespace ember::runtime
