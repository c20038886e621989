// The resumable generation loop of one sequence.
//
// A Generation is the text-generation state machine that Session::generate, the
// Engine and speculative decoding all drive: the driver asks it for the next
// step's part (prompt chunks, then one sampled token at a time), runs the step on
// the executor, possibly together with other sequences' parts, and hands the
// outcome back; the generation then samples, streams text, applies stop tokens,
// stop strings and max_tokens, and says when it is done.
//
//   Generation g(sequence, sampler, options, on_token, prompt);
//   while (!g.done()) {
//     StepPart part = g.next_part(chunk);
//     if (!part.tokens.empty()) executor.step(sequence.cache(), {&part, 1});
//     g.after_step(part);
//   }
//
// A part without tokens means the context is already evaluated (a session that
// continues): after_step() then samples from the logits it has.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "ember/session.hpp"
#include "runtime/sequence.hpp"
#include "runtime/stop_strings.hpp"
#include "tokenizer/tokenizer.hpp"

namespace ember::runtime {

// Receives every generated token (ember::TokenEvent, token -1 for text released at the end).
using TokenSink = std::function<Control(const TokenEvent&)>;

class Generation {
 public:
  using Clock = std::chrono::steady_clock;

  // Checks `options` (invalid_argument naming the field) and appends `prompt` to
  // the sequence as pending tokens. `logprobs` (or options.logprobs): compute TokenEvent::logprob.
  Generation(Sequence& sequence, Sampler& sampler, const GenerateOptions& options, TokenSink on_token,
             std::span<const int32_t> prompt, bool logprobs = false);

  bool done() const { return done_; }
  // Prompt tokens still to evaluate (0 once the prompt is in the cache).
  bool prefilling() const { return !prompt_done_; }
  GenerateResult& result() { return result_; }
  // Tokens the generation may still produce (max_tokens minus those generated).
  int32_t tokens_left() const { return options_.max_tokens - result_.metrics.generated_tokens; }
  Sequence& sequence() { return seq_; }

  // The part the next step must evaluate for this generation (at most `max_tokens`
  // tokens); without tokens when the context is evaluated and only sampling is due.
  StepPart next_part(size_t max_tokens) { return seq_.next_part(max_tokens); }
  // Books the step's outcome. ok: once the whole context is evaluated, samples the
  // next token and streams it (or ends). cancelled: ends with StopReason::cancelled.
  // cache_full: ends with context_full (a prompt that did not fit is dropped again).
  void after_step(const StepPart& part);
  // Ends the generation now with `reason`, flushing held-back text.
  void finish(StopReason reason);

  // Samples the token that follows a context of `context` tokens from `logits` and
  // books it like after_step() does (max_tokens and capacity checks first, then
  // stop tokens, streaming, stop strings). Returns the token when it joins the
  // output (possibly ending the generation with it), nullopt when the generation
  // ended before it. `append`: add it to the sequence as pending; speculative
  // verification passes false and fixes the sequence up itself.
  std::optional<int32_t> sample_from(std::span<const float> logits, size_t context, bool append);

 private:
  void sample_next();
  void emit(int32_t token, const std::string& text, float logprob);

  Sequence& seq_;
  Sampler& sampler_;
  GenerateOptions options_;
  TokenSink on_token_;
  bool logprobs_;
  const tok::Tokenizer& tokenizer_;
  tok::StreamDecoder decoder_;
  StopStringFilter filter_;
  std::vector<int32_t> prompt_;
  size_t prompt_start_ = 0;  // tokens() size before the prompt was appended
  bool prompt_done_ = false;
  bool callback_stopped_ = false;
  bool done_ = false;
  Clock::time_point start_, decode_start_;
  GenerateResult result_;
};

}  // namespace ember::runtime
