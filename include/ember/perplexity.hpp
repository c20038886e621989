// Perplexity of a text, scored the way llama.cpp's llama-perplexity scores it, so that
// the two programs' figures compare:
//   - the text is tokenized once, with BOS when the model adds one, special tokens off;
//   - it is cut into n_tokens / ctx chunks of ctx tokens (the rest is dropped);
//   - each chunk is evaluated from an empty context, its first token replaced by BOS;
//   - only the second half of each chunk is scored: for j in [ctx/2, ctx - 1) the
//     negative log-likelihood of token j+1 under the logits after token j;
//   - perplexity = exp(mean NLL over all scored tokens).
// Used by `ember perplexity` and by `ember quantize --eval`.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "ember/export.hpp"
#include "ember/session.hpp"

namespace ember {

class Model;

struct PerplexityOptions {
  int32_t ctx = 512;              // tokens per chunk, >= 8
  int64_t max_chunks = -1;        // -1: every whole chunk of the text
  SessionOptions session;         // KV storage etc.; kv.max_tokens and prefill_chunk_size are set from ctx
  bool keep_nll = false;          // fill PerplexityResult::nll
  // After each chunk: chunks done (1-based), chunks in all, the running perplexity.
  std::function<void(int64_t chunk, int64_t chunks, double perplexity)> on_chunk;
};

struct PerplexityResult {
  double perplexity = 0;
  double error = 0;               // standard error of the mean NLL, carried to the perplexity
  int64_t chunks = 0, scored = 0, text_tokens = 0;
  std::vector<double> nll;        // each scored token's NLL, in order (keep_nll)
};

// log softmax(logits)[token], computed in double.
EMBER_API double token_log_prob(std::span<const float> logits, int32_t token);

// `text` is used as given (the CLI drops one trailing newline of a file first). Throws
// ember::Error invalid_argument when the text holds fewer than one chunk of ctx tokens
// (the message gives its token count) or ctx < 8, and what evaluating throws.
EMBER_API PerplexityResult perplexity(const Model& model, std::string_view text, const PerplexityOptions& options);
// The same over tokens already made (the first is replaced by BOS per chunk when it is BOS).
EMBER_API PerplexityResult perplexity(const Model& model, const std::vector<int32_t>& tokens,
                                      const PerplexityOptions& options);

}  // namespace ember
