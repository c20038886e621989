// ember::perplexity (include/ember/perplexity.hpp): llama-perplexity's chunked scoring.
#include "ember/perplexity.hpp"

#include <algorithm>
#include <cmath>

#include "common/fail.hpp"
#include "ember/model.hpp"

namespace ember {
double token_log_prob(std::span<const float> row, int32_t target) {
  float max_logit = row[0];
  for (float v : row) max_logit = std::max(max_logit, v);
  double sum = 0.0;
  for (float v : row) sum += std::exp(double(v) - max_logit);
  return double(row[size_t(target)]) - max_logit - std::log(sum);
}

PerplexityResult perplexity(const Model& model, std::string_view text, const PerplexityOptions& options) {
  return perplexity(model, model.tokenize(text, true, false), options);
}

PerplexityResult perplexity(const Model& model, const std::vector<int32_t>& tokens, const PerplexityOptions& options) {
  const int32_t ctx = options.ctx;
  require(ctx >= 8, "perplexity: ctx is {}, must be at least 8", ctx);
  PerplexityResult result;
  result.text_tokens = int64_t(tokens.size());
  int64_t n_chunk = int64_t(tokens.size()) / ctx;
  if (options.max_chunks >= 0) n_chunk = std::min(n_chunk, options.max_chunks);
  require(n_chunk >= 1, "perplexity: the text has {} tokens, fewer than one chunk of --ctx {}", tokens.size(), ctx);

  SessionOptions session_options = options.session;
  session_options.kv.max_tokens = ctx;
  session_options.prefill_chunk_size = std::min<int32_t>(ctx, 512);
  auto session = model.new_session(session_options);
  const int32_t bos = model.bos_token();
  const bool adds_bos = bos >= 0 && tokens.front() == bos;
  const size_t first = size_t(ctx / 2);
  double nll_sum = 0.0, nll_sq_sum = 0.0;
  for (int64_t c = 0; c < n_chunk; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + long(c * ctx), tokens.begin() + long((c + 1) * ctx));
    if (adds_bos) chunk[0] = bos;
    session->reset();
    session->evaluate(chunk, [&](size_t j, std::span<const float> row) {
      if (j < first || j + 1 >= chunk.size()) return;
      const double nll = -token_log_prob(row, chunk[j + 1]);
      nll_sum += nll;
      nll_sq_sum += nll * nll;
      ++result.scored;
      if (options.keep_nll) result.nll.push_back(nll);
    });
    result.chunks = c + 1;
    if (options.on_chunk) options.on_chunk(c + 1, n_chunk, std::exp(nll_sum / double(result.scored)));
  }
  const double mean = nll_sum / double(result.scored);
  result.perplexity = std::exp(mean);
  const double var = std::max(0.0, nll_sq_sum / double(result.scored) - mean * mean);
  result.error = result.perplexity * std::sqrt(var / double(std::max<int64_t>(result.scored - 1, 1)));
  return result;
}

}  // namespace ember
