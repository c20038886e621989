// ember batched-bench: aggregate speed of N concurrent sequences through the Engine,
// measured the way llama.cpp's llama-batched-bench measures it
// (tools/batched-bench/batched-bench.cpp), so that the two compare directly:
//   for each N in -npl: N requests with their own npp-token prompt (random ids);
//   PP  = the first engine step, which prefills all N prompts in one forward pass
//         (and samples each request's first token);
//   TG  = the following ntg steps, each evaluating one token of every request;
//   S_PP = N * npp / T_PP, S_TG = N * ntg / T_TG, S = N * (npp + ntg) / (T_PP + T_TG);
//   TPOT = T_TG / ntg, the time per output token each request sees.
// Also prints the engine's scheduler time (admission, batches, bookkeeping) and its
// sampling time (sampling, detokenizing, streaming) as shares of its step time.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <thread>

#include "cli.hpp"

namespace ember::cli {
namespace {

std::vector<int64_t> int_list(const std::string& text, const char* flag, int64_t lo, int64_t hi) {
  std::vector<int64_t> values;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      size_t used = 0;
      const int64_t v = std::stoll(item, &used);
      if (used != item.size() || v < lo || v > hi) throw std::out_of_range(item);
      values.push_back(v);
    } catch (const std::exception&) {
      throw UsageError(fmt::format("{} takes comma-separated integers in [{}, {}], got '{}'", flag, lo, hi, text));
    }
  }
  if (values.empty()) throw UsageError(fmt::format("{} is empty", flag));
  return values;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

struct Row {
  int64_t npp = 0, ntg = 0, npl = 0;
  double t_pp = 0, t_tg = 0, scheduler_share = 0, sampling_share = 0;
};

// One measurement: N requests of npp prompt tokens, ntg evaluated generation steps.
Row measure(const std::shared_ptr<Model>& model, int64_t npp, int64_t ntg, int64_t npl, std::mt19937& rng,
            bool batch_invariant) {
  EngineOptions options;
  options.batch_invariant = batch_invariant;
  options.max_batch_size = int32_t(npl);
  options.max_batch_tokens = int32_t(std::min<int64_t>(65536, std::max(npp * npl, npl)));
  options.prefill_chunk_size = int32_t(std::min<int64_t>(65536, npp));
  options.kv.max_tokens = int32_t(npp + ntg + 2);
  options.prefix_sharing = false;
  options.min_utilisation = 0.0;
  auto engine = Engine::create(model, options);
  const auto n_vocab = uint32_t(model->info().n_vocab);
  std::vector<RequestHandle> handles;
  for (int64_t i = 0; i < npl; ++i) {
    Request r;
    r.prompt_tokens.resize(size_t(npp));
    for (auto& t : r.prompt_tokens) t = int32_t(rng() % n_vocab);
    r.sampler.temperature = 0.0f;
    r.generate.max_tokens = int32_t(ntg + 1);  // ntg sampled tokens get evaluated, the last one not
    r.generate.stop_at_end_of_generation = false;
    handles.push_back(engine->submit(std::move(r)));
  }
  Row row{npp, ntg, npl};
  const auto t0 = std::chrono::steady_clock::now();
  engine->step();
  row.t_pp = seconds_since(t0);
  for (const RequestHandle h : handles)
    if (engine->result(h).tokens.size() != 1)
      throw Error(ErrorCode::internal, "batched-bench: the first step did not prefill every prompt");
  const auto t1 = std::chrono::steady_clock::now();
  while (engine->pending() > 0) engine->step();
  row.t_tg = seconds_since(t1);
  const EngineMetrics m = engine->metrics();
  row.scheduler_share = m.busy_seconds > 0 ? m.scheduler_seconds / m.busy_seconds : 0.0;
  row.sampling_share = m.busy_seconds > 0 ? m.sampling_seconds / m.busy_seconds : 0.0;
  return row;
}

}  // namespace

int cmd_batched_bench(const std::vector<std::string>& argv) {
  const Args args(argv, {"--model", "--n-prompt", "--n-gen", "--parallel", "--threads", "--repetitions"},
                  {"--json", "--verbose", "--llama-order"},
                  {{"-m", "--model"}, {"-npp", "--n-prompt"}, {"-ntg", "--n-gen"}, {"-npl", "--parallel"},
                   {"-t", "--threads"}, {"-r", "--repetitions"}, {"-v", "--verbose"}});
  const std::string model_path = args.get("--model");
  const auto npps = int_list(args.get_or("--n-prompt", "128"), "-npp", 1, 16384);
  const auto ntgs = int_list(args.get_or("--n-gen", "128"), "-ntg", 1, 16384);
  const auto npls = int_list(args.get_or("--parallel", "1,2,4,8,16"), "-npl", 1, 1024);
  const int threads = int(args.get_int("--threads", 0, 0, 1024));
  const int reps = int(args.get_int("--repetitions", 1, 1, 100));
  const bool json = args.has("--json");
  // --llama-order: llama.cpp's sums instead of batch-invariant ones (EngineOptions::batch_invariant).
  const bool invariant = !args.has("--llama-order");

  auto model = load_model(model_path, threads, args.has("--verbose"));
  const int used_threads = model->threads();
  std::mt19937 rng(1234);
  // Warm-up at the largest shape: pages in the weights, starts the thread pool and
  // commits the KV pool memory the runs will use (first writes fault pages in).
  measure(model, *std::max_element(npps.begin(), npps.end()), 2, *std::max_element(npls.begin(), npls.end()), rng,
          invariant);

  if (!json) {
    std::printf("model: %s, threads: %d\n\n", model_path.c_str(), used_threads);
    std::printf("|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s | TPOT ms | sched %% | sample %% |\n");
    std::printf("|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|---------|---------|----------|\n");
  }
  for (const int64_t npp : npps)
    for (const int64_t ntg : ntgs)
      for (const int64_t npl : npls) {
        // The best of the repetitions, as the machine is shared.
        Row best;
        for (int r = 0; r < reps; ++r) {
          const Row row = measure(model, npp, ntg, npl, rng, invariant);
          if (r == 0 || row.t_pp + row.t_tg < best.t_pp + best.t_tg) best = row;
        }
        const double s_pp = double(npl * npp) / best.t_pp, s_tg = double(npl * ntg) / best.t_tg;
        const double t = best.t_pp + best.t_tg, s = double(npl * (npp + ntg)) / t;
        const int64_t n_kv = npl * (npp + ntg);
        if (json) {
          std::printf(
              "{\"pp\": %lld, \"tg\": %lld, \"pl\": %lld, \"n_kv\": %lld, \"t_pp\": %.6f, \"speed_pp\": %.3f, "
              "\"t_tg\": %.6f, \"speed_tg\": %.3f, \"t\": %.6f, \"speed\": %.3f, \"tpot_ms\": %.3f, "
              "\"scheduler_share\": %.5f, \"sampling_share\": %.5f, \"threads\": %d}\n",
              (long long)npp, (long long)ntg, (long long)npl, (long long)n_kv, best.t_pp, s_pp, best.t_tg, s_tg, t,
              s, 1e3 * best.t_tg / double(ntg), best.scheduler_share, best.sampling_share, used_threads);
        } else {
          std::printf(
              "| %5lld | %6lld | %4lld | %6lld | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f | %7.2f | %7.2f | %8.2f |\n",
              (long long)npp, (long long)ntg, (long long)npl, (long long)n_kv, best.t_pp, s_pp, best.t_tg, s_tg, t, s,
              1e3 * best.t_tg / double(ntg), 100.0 * best.scheduler_share, 100.0 * best.sampling_share);
        }
        std::fflush(stdout);
      }
  return 0;
}

}  // namespace ember::cli
