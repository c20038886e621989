// ember bench: prefill and decode speed of a model, with the weight bandwidth a
// decode step implies (the roofline of a memory-bound decoder).
//
// Measured as llama.cpp's llama-bench measures pp<N> and tg<N>, with its -d
// (tools/llama-bench/llama-bench.cpp), so that the two can be compared directly:
//   depth      -d D: the measured prefill and decode start after D random tokens already
//              in the cache (evaluated once, untimed, and extended for the next larger
//              depth; each repetition runs on a fork of that session, which shares its
//              pages, so nothing is evaluated twice);
//   warm-up    one prefill of n_prompt tokens and one decode step, untimed;
//   prefill    per repetition: n_prompt random tokens evaluated as one batch (chunks
//              of 512, llama-bench's default micro-batch) after the depth;
//   decode     per repetition: n_gen single-token steps after the depth, all timed;
//   speed      tokens / seconds of each repetition; the mean and standard deviation
//              over the repetitions are printed (llama-bench's avg_ts and stddev_ts).
// -p, -n, -t and -d take comma lists (every combination is measured, as llama-bench);
// --kv-type and --kv-group choose the cache storage.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

#include "cli.hpp"
#include "speculative_args.hpp"

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

// "512,1024" as numbers in [lo, hi]; throws UsageError.
std::vector<int64_t> int_list(const Args& args, const std::string& name, const std::string& fallback, int64_t lo,
                              int64_t hi) {
  std::vector<int64_t> values;
  const std::string text = args.get_or(name, fallback);
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    char* end = nullptr;
    const long long v = item.empty() ? 0 : std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || end == nullptr || *end != '\0' || v < lo || v > hi)
      throw UsageError(fmt::format("{} takes numbers in [{}, {}] separated by commas, got '{}'", name, lo, hi, text));
    values.push_back(v);
    start = comma + 1;
  }
  return values;
}

void expect_ok(Outcome outcome, const char* what) {
  if (outcome != Outcome::ok)
    throw Error(ErrorCode::out_of_memory, fmt::format("bench: {} did not fit the cache ({})", what, to_string(outcome)));
}

struct BenchResult {
  int threads;
  int64_t depth, n_prompt, n_gen;  // a prefill test has n_gen 0, a decode test n_prompt 0
  Stats speed;
  std::vector<double> samples;
};

int cmd_bench(const std::vector<std::string>& argv) {
  std::vector<std::string> flags = {"--model", "--n-prompt", "--n-gen", "--threads", "--repetitions", "--n-depth"};
  flags.insert(flags.end(), kKVFlags.begin(), kKVFlags.end());
  flags.insert(flags.end(), kSpeculativeFlags.begin(), kSpeculativeFlags.end());
  std::map<std::string, std::string> aliases = {{"-m", "--model"},       {"-p", "--n-prompt"}, {"-n", "--n-gen"},
                                                {"-t", "--threads"},     {"-r", "--repetitions"},
                                                {"-d", "--n-depth"},     {"-v", "--verbose"}};
  aliases.insert(kSpeculativeAliases.begin(), kSpeculativeAliases.end());
  const Args args(argv, flags, {"--json", "--verbose"}, aliases);
  const std::string model_path = args.get("--model");
  // 0 skips that test, as in llama-bench (-n 0: prefill only).
  const std::vector<int64_t> prompts = int_list(args, "--n-prompt", "512", 0, 1 << 20);
  const std::vector<int64_t> gens = int_list(args, "--n-gen", "64", 0, 1 << 20);
  const std::vector<int64_t> thread_counts = int_list(args, "--threads", "0", 0, 1024);
  const std::vector<int64_t> depths = int_list(args, "--n-depth", "0", 0, 1 << 22);
  const int reps = int(args.get_int("--repetitions", 3, 1, 100));
  const auto all_zero = [](const std::vector<int64_t>& v) {
    return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 0; });
  };
  if (all_zero(prompts) && all_zero(gens)) throw UsageError("bench: -p and -n are both 0, nothing to measure");
  if (args.has("--draft") || args.has("--model-draft")) {
    if (gens[0] == 0) throw UsageError("bench with a draft measures decode: -n must be at least 1");
    // Plain against speculative decode on the same prompts (one thread count, the first).
    auto model = load_model(model_path, int(thread_counts[0]), args.has("--verbose"));
    const SpeculativeOptions spec = speculative_options(args, int(thread_counts[0]), args.has("--verbose"));
    return bench_speculative(*model, spec, int32_t(gens[0]), reps, args.has("--json"));
  }
  SessionOptions options;
  apply_kv_args(args, options.kv);
  if (options.kv.eviction != KVEviction::none) throw UsageError("bench measures a cache without eviction");
  const int64_t max_prompt = *std::max_element(prompts.begin(), prompts.end());
  const int64_t max_gen = *std::max_element(gens.begin(), gens.end());
  const int64_t max_depth = *std::max_element(depths.begin(), depths.end());
  if (max_depth + max_prompt + max_gen >= (int64_t(1) << 24)) throw UsageError("bench: depth + prompt + gen too large");
  options.kv.max_tokens = int32_t(max_depth + std::max(max_prompt, max_gen) + 1);
  options.prefill_chunk_size = 512;  // llama-bench's n_ubatch, for the prompt and the depth

  std::vector<BenchResult> results;
  std::string model_name;
  size_t decode_bytes = 0;
  for (const int64_t threads : thread_counts) {
    auto model = load_model(model_path, int(threads), args.has("--verbose"));
    model_name = model->info().name;
    decode_bytes = model->info().decode_bytes_per_token;
    const int used_threads = model->threads();
    // Random tokens, as llama-bench uses, from a fixed seed.
    std::mt19937 rng(1234);
    const auto n_vocab = uint32_t(model->info().n_vocab);
    auto random_tokens = [&](int64_t n) {
      std::vector<int32_t> tokens(static_cast<size_t>(n));
      for (auto& t : tokens) t = int32_t(rng() % n_vocab);
      return tokens;
    };
    const std::vector<int32_t> context = random_tokens(max_depth), prompt = random_tokens(max_prompt),
                               generated = random_tokens(max_gen);
    auto base = model->new_session(options);
    // Warm-up, as llama-bench: a whole prefill and one decode step.
    if (!prompt.empty()) base->prefill(std::span(prompt));
    base->reset();
    if (!generated.empty()) base->decode(generated[0]);
    base->reset();
    for (const int64_t depth : depths) {
      // A deeper cache than the last one extends it; a shallower one starts again.
      if (base->position() > depth) base->reset();
      expect_ok(base->prefill(std::span(context).subspan(size_t(base->position()), size_t(depth - base->position()))),
                "the depth");
      for (const int64_t n_prompt : prompts) {
        if (n_prompt == 0) continue;
        BenchResult r{used_threads, depth, n_prompt, 0, {}, {}};
        for (int rep = 0; rep < reps; ++rep) {
          const auto session = base->fork();
          const double t0 = now_seconds();
          expect_ok(session->prefill(std::span(prompt).first(size_t(n_prompt))), "the prompt");
          r.samples.push_back(double(n_prompt) / (now_seconds() - t0));
        }
        r.speed = stats(r.samples);
        results.push_back(r);
      }
      for (const int64_t n_gen : gens) {
        if (n_gen == 0) continue;
        BenchResult r{used_threads, depth, 0, n_gen, {}, {}};
        for (int rep = 0; rep < reps; ++rep) {
          const auto session = base->fork();
          const double t0 = now_seconds();
          for (int64_t i = 0; i < n_gen; ++i) expect_ok(session->decode(generated[size_t(i)]), "a decode step");
          r.samples.push_back(double(n_gen) / (now_seconds() - t0));
        }
        r.speed = stats(r.samples);
        results.push_back(r);
      }
    }
  }

  const double bytes = double(decode_bytes);
  if (!args.has("--json")) {
    std::printf("model:   %s (%s), KV %s\n", model_path.c_str(), model_name.c_str(), describe_kv(options.kv).c_str());
    std::printf("repetitions: %d\n", reps);
    std::printf("%8s %8s %10s %20s %22s\n", "threads", "depth", "test", "tokens/s", "GB/s of weights");
  }
  for (const BenchResult& r : results) {
    const bool prefill = r.n_gen == 0;
    const std::string test = prefill ? fmt::format("pp{}", r.n_prompt) : fmt::format("tg{}", r.n_gen);
    // Weight bytes per second: one stream of the weights per decode step, one per chunk of prefill.
    const double gbs = prefill ? r.speed.mean / double(std::min<int64_t>(r.n_prompt, 512)) * bytes / 1e9
                               : r.speed.mean * bytes / 1e9;
    if (args.has("--json")) {
      std::printf(
          "{\"model\": %s, \"threads\": %d, \"n_depth\": %lld, \"n_prompt\": %lld, \"n_gen\": %lld, "
          "\"kv_type\": %s, \"repetitions\": %d, \"test\": \"%s\", \"%s_tokens_per_s\": %.3f, \"stddev\": %.3f, "
          "\"samples\": %s, \"weight_gb_per_s\": %.3f, \"decode_bytes_per_token\": %.0f}\n",
          json_string(model_path).c_str(), r.threads, (long long)r.depth, (long long)r.n_prompt, (long long)r.n_gen,
          json_string(describe_kv(options.kv)).c_str(), reps, test.c_str(), prefill ? "prefill" : "decode",
          r.speed.mean, r.speed.stddev, json_array(r.samples).c_str(), gbs, bytes);
    } else {
      const std::string at = r.depth > 0 ? fmt::format("{} @ d{}", test, r.depth) : test;
      std::printf("%8d %8lld %10s %11.2f ± %6.2f %22.2f\n", r.threads, (long long)r.depth, at.c_str(), r.speed.mean,
                  r.speed.stddev, gbs);
    }
  }
  return 0;
}

}  // namespace ember::cli
