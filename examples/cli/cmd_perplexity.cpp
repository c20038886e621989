// ember perplexity: perplexity of a text file, computed the way llama.cpp's
// llama-perplexity does so that the two can be compared:
//   - one trailing newline of the file is dropped, then the whole text is
//     tokenized once, with BOS when the model adds one and special tokens off;
//   - it is cut into n_chunk = n_tokens / ctx chunks of ctx tokens (the rest is dropped);
//   - each chunk is evaluated from an empty context, its first token replaced by BOS;
//   - only the second half of each chunk is scored: for j in [ctx/2, ctx - 1) the
//     negative log-likelihood of token j+1 under the logits after token j;
//   - perplexity = exp(mean NLL over all scored tokens).
//
// With --stream the text is instead read as one stream by a single session whose
// cache is bounded by the KV flags (--evict streaming/h2o, --ctx for none): every
// token after the first is scored, in batches of --batch tokens, and the perplexity
// of each --segment tokens is printed with the session's KV memory at its end
// (also as CSV with --csv FILE).
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "cli.hpp"

namespace ember::cli {
namespace {

// The whole text as one stream through a bounded cache.
int stream_perplexity(const Args& args, Model& model, const std::vector<int32_t>& tokens, SessionOptions options) {
  const auto batch = size_t(args.get_int("--batch", 16, 1, 4096));
  const auto segment = size_t(args.get_int("--segment", 1000, 1, 1 << 30));
  // --restart N: a fresh session (and a BOS) every N tokens; each part is its own stream.
  const auto restart = size_t(args.get_int("--restart", 0, 0, 1 << 30));
  auto session = model.new_session(options);
  std::FILE* csv = nullptr;
  if (args.has("--csv")) {
    csv = std::fopen(args.get("--csv").c_str(), "w");
    if (!csv) throw Error(ErrorCode::io, fmt::format("cannot write '{}'", args.get("--csv")));
    std::fprintf(csv, "segment,first_token,last_token,perplexity,kv_tokens,kv_bytes\n");
  }
  std::printf("stream of %zu tokens, KV %s\n", tokens.size(), describe_kv(options.kv).c_str());
  std::printf("%8s %16s %12s %10s %12s\n", "segment", "tokens", "perplexity", "kv tokens", "kv MiB");
  double total = 0.0, seg_sum = 0.0;
  size_t total_n = 0, seg_n = 0, seg_index = 0;
  ProgressBar bar("perplexity");
  auto close_segment = [&](size_t last_target) {
    const KVSessionMemory mem = session->kv_memory();
    const size_t kv_bytes = mem.bytes + mem.exact_bytes;  // the exact window's F16 pages too
    const double ppl = std::exp(seg_sum / double(seg_n));
    std::printf("%8zu %7zu-%-8zu %12.4f %10d %12.2f\n", seg_index, last_target + 1 - seg_n, last_target, ppl,
                mem.tokens, double(kv_bytes) / (1 << 20));
    if (csv)
      std::fprintf(csv, "%zu,%zu,%zu,%.6f,%d,%zu\n", seg_index, last_target + 1 - seg_n, last_target, ppl, mem.tokens,
                   kv_bytes);
    if (csv) std::fflush(csv);
    std::fflush(stdout);
    ++seg_index;
    seg_sum = 0.0;
    seg_n = 0;
  };
  const int32_t bos = model.bos_token();
  const size_t part_len = restart > 0 ? restart : tokens.size();
  std::vector<int32_t> part;
  for (size_t p0 = 0; p0 + 1 < tokens.size(); p0 += part_len) {
    const size_t p1 = std::min(tokens.size(), p0 + part_len);
    if (p0 > 0) session->reset();
    // Inputs are tokens [p0, p1 - 1); token p1 - 1 is only a target.
    for (size_t at = p0; at + 1 < p1; at += batch) {
      const size_t n = std::min(batch, p1 - 1 - at);
      part.assign(tokens.begin() + long(at), tokens.begin() + long(at + n));
      if (at == p0 && p0 > 0 && bos >= 0) part[0] = bos;
      session->evaluate(part, [&](size_t j, std::span<const float> row) {
        const size_t target = at + j + 1;
        const double nll = -token_log_prob(row, tokens[target]);
        total += nll, seg_sum += nll;
        ++total_n, ++seg_n;
        if (seg_n == segment) close_segment(target);
      });
      bar.update(double(at + n) / double(tokens.size() - 1));
    }
  }
  bar.done();
  if (seg_n > 0) close_segment(tokens.size() - 1);
  if (csv) std::fclose(csv);
  std::printf("perplexity: %.4f over %zu tokens (stream)\n", std::exp(total / double(total_n)), total_n);
  return 0;
}

}  // namespace

int cmd_perplexity(const std::vector<std::string>& argv) {
  std::vector<std::string> flags = {"--model", "--file",  "--ctx", "--threads", "--chunks",
                                    "--batch", "--segment", "--csv", "--tokens",  "--restart", "--nll"};
  flags.insert(flags.end(), kKVFlags.begin(), kKVFlags.end());
  const Args args(argv, flags, {"--verbose", "--stream"},
                  {{"-m", "--model"}, {"-f", "--file"}, {"-c", "--ctx"}, {"-t", "--threads"}, {"-v", "--verbose"}});
  const std::string model_path = args.get("--model");
  const std::string path = args.get("--file");
  const int32_t ctx = int32_t(args.get_int("--ctx", 512, 8, 1 << 20));
  const int64_t max_chunks = args.get_int("--chunks", -1, -1, 1 << 30);
  SessionOptions options;
  options.kv.max_tokens = ctx;
  apply_kv_args(args, options.kv);
  std::string text = read_text_file(path, "text file");
  if (!text.empty() && text.back() == '\n') text.pop_back();

  auto model = load_model(model_path, int(args.get_int("--threads", 0, 0, 1024)), args.has("--verbose"));
  std::vector<int32_t> tokens = model->tokenize(text, true, false);
  if (args.has("--tokens")) tokens.resize(std::min(tokens.size(), size_t(args.get_int("--tokens", 0, 2, 1 << 30))));
  if (args.has("--stream")) return stream_perplexity(args, *model, tokens, options);
  PerplexityOptions popts{.ctx = ctx, .max_chunks = max_chunks, .session = options, .keep_nll = args.has("--nll")};
  // --nll FILE: every scored token's negative log-likelihood, one per line, so that two
  // runs over the same text can be compared token by token (bench/kv_quality.py).
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> nll_out(nullptr, &std::fclose);
  if (args.has("--nll")) {
    nll_out.reset(std::fopen(args.get("--nll").c_str(), "w"));
    if (!nll_out) throw Error(ErrorCode::io, fmt::format("cannot write '{}'", args.get("--nll")));
  }
  ProgressBar bar("perplexity");
  popts.on_chunk = [&](int64_t c, int64_t n, double running) {
    bar.update(double(c) / double(n));
    if (args.has("--verbose")) std::fprintf(stderr, "[%lld] %.4f\n", static_cast<long long>(c), running);
  };
  const PerplexityResult r = perplexity(*model, tokens, popts);
  bar.done();
  for (double nll : r.nll) std::fprintf(nll_out.get(), "%.6f\n", nll);
  std::printf("perplexity: %.4f +/- %.4f (%lld chunks of %d tokens, %lld tokens scored, %zu in the text)\n", r.perplexity,
              r.error, static_cast<long long>(r.chunks), ctx, static_cast<long long>(r.scored), tokens.size());
  return 0;
}

}  // namespace ember::cli
