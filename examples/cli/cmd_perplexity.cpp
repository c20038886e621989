// ember perplexity: perplexity of a text file, computed the way llama.cpp's
// llama-perplexity does so that the two can be compared:
//   - one trailing newline of the file is dropped, then the whole text is
//     tokenized once, with BOS when the model adds one and special tokens off;
//   - it is cut into n_chunk = n_tokens / ctx chunks of ctx tokens (the rest is dropped);
//   - each chunk is evaluated from an empty context, its first token replaced by BOS;
//   - only the second half of each chunk is scored: for j in [ctx/2, ctx - 1) the
//     negative log-likelihood of token j+1 under the logits after token j;
//   - perplexity = exp(mean NLL over all scored tokens).
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli.hpp"

namespace ember::cli {
namespace {

// log softmax(row)[target], in double.
double log_prob(std::span<const float> row, int32_t target) {
  float max_logit = row[0];
  for (float v : row) max_logit = std::max(max_logit, v);
  double sum = 0.0;
  for (float v : row) sum += std::exp(double(v) - max_logit);
  return double(row[size_t(target)]) - max_logit - std::log(sum);
}

}  // namespace

int cmd_perplexity(const std::vector<std::string>& argv) {
  const Args args(argv, {"--model", "--file", "--ctx", "--threads", "--chunks"}, {"--verbose"},
                  {{"-m", "--model"}, {"-f", "--file"}, {"-c", "--ctx"}, {"-t", "--threads"}, {"-v", "--verbose"}});
  const std::string model_path = args.get("--model");
  const std::string path = args.get("--file");
  const int32_t ctx = int32_t(args.get_int("--ctx", 512, 8, 1 << 20));
  const int64_t max_chunks = args.get_int("--chunks", -1, -1, 1 << 30);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::io, fmt::format("cannot open '{}'", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  if (!text.empty() && text.back() == '\n') text.pop_back();

  auto model = load_model(model_path, int(args.get_int("--threads", 0, 0, 1024)), args.has("--verbose"));
  const std::vector<int32_t> tokens = model->tokenize(text, true, false);
  int64_t n_chunk = int64_t(tokens.size()) / ctx;
  if (max_chunks >= 0) n_chunk = std::min(n_chunk, max_chunks);
  if (n_chunk < 1)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("the text has {} tokens, fewer than one chunk of --ctx {}", tokens.size(), ctx));

  SessionOptions options;
  options.kv.max_tokens = ctx;
  options.prefill_chunk_size = std::min<int32_t>(ctx, 512);
  auto session = model->new_session(options);
  const int32_t bos = model->bos_token();
  const bool adds_bos = bos >= 0 && tokens.front() == bos;
  const size_t first = size_t(ctx / 2);

  double nll_sum = 0.0, nll_sq_sum = 0.0;
  int64_t scored = 0;
  ProgressBar bar("perplexity");
  for (int64_t c = 0; c < n_chunk; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + long(c * ctx), tokens.begin() + long((c + 1) * ctx));
    if (adds_bos) chunk[0] = bos;
    session->reset();
    session->evaluate(chunk, [&](size_t j, std::span<const float> row) {
      if (j < first || j + 1 >= chunk.size()) return;
      const double nll = -log_prob(row, chunk[j + 1]);
      nll_sum += nll;
      nll_sq_sum += nll * nll;
      ++scored;
    });
    bar.update(double(c + 1) / double(n_chunk));
    if (args.has("--verbose"))
      std::fprintf(stderr, "[%lld] %.4f\n", static_cast<long long>(c + 1), std::exp(nll_sum / double(scored)));
  }
  bar.done();
  const double mean = nll_sum / double(scored);
  const double ppl = std::exp(mean);
  // Standard error of the mean NLL, carried to the perplexity.
  const double var = std::max(0.0, nll_sq_sum / double(scored) - mean * mean);
  const double err = ppl * std::sqrt(var / double(std::max<int64_t>(scored - 1, 1)));
  std::printf("perplexity: %.4f +/- %.4f (%lld chunks of %d tokens, %lld tokens scored, %zu in the text)\n", ppl, err,
              static_cast<long long>(n_chunk), ctx, static_cast<long long>(scored), tokens.size());
  return 0;
}

}  // namespace ember::cli
