// ember bench: prefill and decode speed of a model, with the weight bandwidth a
// decode step implies (the roofline of a memory-bound decoder).
//
// Measured as llama.cpp's llama-bench measures pp<N> and tg<N>
// (tools/llama-bench/llama-bench.cpp), so that the two can be compared directly:
//   warm-up    one prefill of n_prompt tokens and one decode step, untimed;
//   prefill    per repetition: empty cache, then n_prompt random tokens evaluated
//              as one batch (chunks of 512, llama-bench's default micro-batch);
//   decode     per repetition: empty cache, then n_gen single-token steps, the
//              first at position 0, all timed;
//   speed      tokens / seconds of each repetition; the mean and standard deviation
//              over the repetitions are printed (llama-bench's avg_ts and stddev_ts).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

#include "cli.hpp"

namespace ember::cli {
namespace {

// A string as a JSON string literal.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", int(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Mean and sample standard deviation, as llama-bench computes them.
struct Stats {
  double mean = 0.0, stddev = 0.0;
};
Stats stats(const std::vector<double>& v) {
  Stats s;
  for (const double x : v) s.mean += x;
  s.mean /= double(v.size());
  if (v.size() > 1) {
    double sq = 0.0;
    for (const double x : v) sq += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(sq / double(v.size() - 1));
  }
  return s;
}

std::string json_array(const std::vector<double>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += fmt::format("{}{:.3f}", i ? ", " : "", v[i]);
  return out + "]";
}

}  // namespace

int cmd_bench(const std::vector<std::string>& argv) {
  const Args args(argv, {"--model", "--n-prompt", "--n-gen", "--threads", "--repetitions"}, {"--json", "--verbose"},
                  {{"-m", "--model"}, {"-p", "--n-prompt"}, {"-n", "--n-gen"}, {"-t", "--threads"},
                   {"-r", "--repetitions"}, {"-v", "--verbose"}});
  const std::string model_path = args.get("--model");
  const int32_t n_prompt = int32_t(args.get_int("--n-prompt", 512, 1, 1 << 20));
  const int32_t n_gen = int32_t(args.get_int("--n-gen", 64, 1, 1 << 20));
  const int threads = int(args.get_int("--threads", 0, 0, 1024));
  const int reps = int(args.get_int("--repetitions", 3, 1, 100));

  auto model = load_model(model_path, threads, args.has("--verbose"));
  SessionOptions options;
  options.kv.max_tokens = std::max(n_prompt, n_gen) + 1;
  options.prefill_chunk_size = std::min<int32_t>(n_prompt, 512);
  auto session = model->new_session(options);

  // Random tokens, as llama-bench uses, from a fixed seed.
  std::mt19937 rng(1234);
  const auto n_vocab = uint32_t(model->info().n_vocab);
  std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
  for (auto& t : prompt) t = int32_t(rng() % n_vocab);
  std::vector<int32_t> generated(static_cast<size_t>(n_gen));
  for (auto& t : generated) t = int32_t(rng() % n_vocab);

  // Warm-up, as llama-bench: a whole prefill and one decode step.
  session->prefill(prompt);
  session->reset();
  session->decode(generated[0]);

  std::vector<double> prefill_tps, decode_tps;
  for (int r = 0; r < reps; ++r) {
    session->reset();
    const double t0 = now_seconds();
    session->prefill(prompt);
    prefill_tps.push_back(double(n_prompt) / (now_seconds() - t0));

    session->reset();
    const double t1 = now_seconds();
    for (const int32_t token : generated) session->decode(token);
    decode_tps.push_back(double(n_gen) / (now_seconds() - t1));
  }
  const Stats prefill = stats(prefill_tps), decode = stats(decode_tps);
  const double bytes = double(model->info().decode_bytes_per_token);
  const double decode_gbs = decode.mean * bytes / 1e9;
  const double prefill_gbs = prefill.mean / double(options.prefill_chunk_size) * bytes / 1e9;
  const int used_threads = threads == 0 ? int(std::thread::hardware_concurrency()) : threads;

  if (args.has("--json")) {
    std::printf(
        "{\"model\": %s, \"threads\": %d, \"n_prompt\": %d, \"n_gen\": %d, \"repetitions\": %d, "
        "\"prefill_tokens_per_s\": %.3f, \"prefill_stddev\": %.3f, \"prefill_samples\": %s, "
        "\"decode_tokens_per_s\": %.3f, \"decode_stddev\": %.3f, \"decode_samples\": %s, "
        "\"decode_weight_gb_per_s\": %.3f, \"decode_bytes_per_token\": %.0f}\n",
        json_string(model_path).c_str(), used_threads, n_prompt, n_gen, reps, prefill.mean, prefill.stddev,
        json_array(prefill_tps).c_str(), decode.mean, decode.stddev, json_array(decode_tps).c_str(), decode_gbs, bytes);
  } else {
    std::printf("model:   %s (%s)\n", model_path.c_str(), model->info().name.c_str());
    std::printf("threads: %d, repetitions: %d\n", used_threads, reps);
    std::printf("prefill: pp%-6d %9.2f ± %.2f tokens/s  (%.2f GB/s of weights)\n", n_prompt, prefill.mean,
                prefill.stddev, prefill_gbs);
    std::printf("decode:  tg%-6d %9.2f ± %.2f tokens/s  (%.2f GB/s of weights, %.1f MiB per token)\n", n_gen,
                decode.mean, decode.stddev, decode_gbs, bytes / (1 << 20));
  }
  return 0;
}

}  // namespace ember::cli
