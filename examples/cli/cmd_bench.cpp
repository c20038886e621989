// ember bench: prefill and decode speed of a model, with the weight bandwidth a
// decode step implies (the roofline of a memory-bound decoder).
#include <fmt/format.h>

#include <chrono>
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
  options.kv.max_tokens = n_prompt + n_gen + 1;
  options.prefill_chunk_size = std::min<int32_t>(n_prompt, 512);
  auto session = model->new_session(options);

  // Random tokens, as llama-bench uses, from a fixed seed.
  std::mt19937 rng(1234);
  std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
  for (auto& t : prompt) t = int32_t(rng() % uint32_t(model->info().n_vocab));

  // Warm-up: touches the weights and the caches once.
  session->prefill(std::span(prompt.data(), std::min<size_t>(prompt.size(), 16)));
  session->decode(prompt[0]);

  double prefill_time = 0.0, decode_time = 0.0;
  for (int r = 0; r < reps; ++r) {
    session->reset();
    const double t0 = now_seconds();
    session->prefill(prompt);
    prefill_time += now_seconds() - t0;

    session->reset();
    session->decode(prompt[0]);
    const double t1 = now_seconds();
    for (int32_t i = 0; i < n_gen; ++i) session->decode(prompt[size_t(i + 1) % prompt.size()]);
    decode_time += now_seconds() - t1;
  }
  const double prefill_tps = double(n_prompt) * reps / prefill_time;
  const double decode_tps = double(n_gen) * reps / decode_time;
  const double bytes = double(model->info().decode_bytes_per_token);
  const double decode_gbs = decode_tps * bytes / 1e9;
  const double prefill_gbs = prefill_tps / double(options.prefill_chunk_size) * bytes / 1e9;
  const int used_threads = threads == 0 ? int(std::thread::hardware_concurrency()) : threads;

  if (args.has("--json")) {
    std::printf(
        "{\"model\": %s, \"threads\": %d, \"n_prompt\": %d, \"n_gen\": %d, \"repetitions\": %d, "
        "\"prefill_tokens_per_s\": %.3f, \"decode_tokens_per_s\": %.3f, \"decode_weight_gb_per_s\": %.3f, "
        "\"decode_bytes_per_token\": %.0f}\n",
        json_string(model_path).c_str(), used_threads, n_prompt, n_gen, reps, prefill_tps, decode_tps, decode_gbs, bytes);
  } else {
    std::printf("model:   %s (%s)\n", model_path.c_str(), model->info().name.c_str());
    std::printf("threads: %d, repetitions: %d\n", used_threads, reps);
    std::printf("prefill: %6d tokens  %9.2f tokens/s  (%.2f GB/s of weights)\n", n_prompt, prefill_tps, prefill_gbs);
    std::printf("decode:  %6d tokens  %9.2f tokens/s  (%.2f GB/s of weights, %.1f MiB per token)\n", n_gen,
                decode_tps, decode_gbs, bytes / (1 << 20));
  }
  return 0;
}

}  // namespace ember::cli
