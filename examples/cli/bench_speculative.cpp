// `ember bench --draft ...`: plain and speculative decode of the same prompts, one
// after the other in one run (greedy, so that both generate the same tokens).
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli.hpp"

namespace ember::cli {
namespace {

struct Prompt {
  const char* kind;
  const char* text;
};

// Four kinds of text a host generates: a story, code, an answer, a summary of a
// given text (which prompt lookup can copy from).
constexpr Prompt kPrompts[] = {
    {"story", "Write a long story about a lighthouse keeper who finds a message in a bottle. Once upon a time,"},
    {"code",
     "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n\n"
     "class Calculator:\n    def __init__(self):\n"},
    {"qa", "Question: What is the capital of France, and what river flows through it? Explain in a few "
           "sentences.\nAnswer:"},
    {"summary",
     "The Industrial Revolution began in Britain in the late eighteenth century. Steam engines, first used to pump "
     "water from mines, were soon driving looms and locomotives. Factories drew workers from the countryside into "
     "fast-growing towns, where wages were low and housing was crowded.\n\nSummarise the text above.\nSummary: The "
     "Industrial Revolution began in Britain"},
};

GenerateResult generate_once(const Model& model, const std::string& prompt, int32_t n,
                             const SpeculativeOptions& spec) {
  auto session = model.new_session({.kv = {.max_tokens = 2048}, .batch_invariant = true});
  Sampler sampler = Sampler::greedy();
  GenerateOptions g;
  g.max_tokens = n;
  g.stop_at_end_of_generation = false;
  g.speculative = spec;
  return session->generate(prompt, sampler, g);
}

}  // namespace

int bench_speculative(const Model& model, const SpeculativeOptions& spec, int32_t n_gen, int repetitions,
                      bool json) {
  if (!json)
    std::printf("| prompt | plain t/s | speculative t/s | speedup | acceptance | tokens a step | same tokens |\n"
                "|---|---|---|---|---|---|---|\n");
  generate_once(model, kPrompts[0].text, 8, spec);  // warm-up: pages, threads, a self draft's weights
  for (const Prompt& p : kPrompts) {
    double plain_tps = 0.0, spec_tps = 0.0;
    GenerateResult plain, fast;
    for (int r = 0; r < repetitions; ++r) {
      plain = generate_once(model, p.text, n_gen, {});
      fast = generate_once(model, p.text, n_gen, spec);
      plain_tps += plain.metrics.decode_tokens_per_second() / repetitions;
      spec_tps += fast.metrics.decode_tokens_per_second() / repetitions;
    }
    const SpeculativeMetrics& s = fast.speculative;
    const bool same = plain.tokens == fast.tokens;
    if (json) {
      std::printf("{\"test\": \"speculative\", \"prompt\": \"%s\", \"n_gen\": %d, \"plain_tokens_per_s\": %.3f, "
                  "\"speculative_tokens_per_s\": %.3f, \"drafted\": %lld, \"accepted\": %lld, \"steps\": %lld, "
                  "\"acceptance\": %.4f, \"same_tokens\": %s}\n",
                  p.kind, n_gen, plain_tps, spec_tps, (long long)s.drafted, (long long)s.accepted,
                  (long long)s.steps, s.acceptance_rate(), same ? "true" : "false");
    } else {
      std::printf("| %s | %.1f | %.1f | %.2f | %.0f %% | %.2f | %s |\n", p.kind, plain_tps, spec_tps,
                  spec_tps / plain_tps, 100.0 * s.acceptance_rate(), s.mean_accepted_per_step(), same ? "yes" : "NO");
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace ember::cli
