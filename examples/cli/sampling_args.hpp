// Sampler flags shared by `ember run` and `ember chat`.
#pragma once

#include "cli.hpp"

namespace ember::cli {

inline const std::vector<std::string> kSamplingFlags = {"--temp",           "--top-k",         "--top-p",
                                                        "--min-p",          "--repeat-penalty", "--repeat-last-n",
                                                        "--freq-penalty",   "--presence-penalty", "--seed"};

inline SamplerOptions sampler_options(const Args& args) {
  SamplerOptions o;
  o.temperature = float(args.get_double("--temp", o.temperature, 0.0, 100.0));
  o.top_k = int(args.get_int("--top-k", o.top_k, 0, 1 << 30));
  o.top_p = float(args.get_double("--top-p", o.top_p, 1e-6, 1.0));
  o.min_p = float(args.get_double("--min-p", o.min_p, 0.0, 1.0));
  o.repetition_penalty = float(args.get_double("--repeat-penalty", o.repetition_penalty, 1e-3, 100.0));
  o.penalty_last_n = int(args.get_int("--repeat-last-n", o.penalty_last_n, -1, 1 << 30));
  o.frequency_penalty = float(args.get_double("--freq-penalty", o.frequency_penalty, -100.0, 100.0));
  o.presence_penalty = float(args.get_double("--presence-penalty", o.presence_penalty, -100.0, 100.0));
  if (args.has("--seed")) o.seed = uint64_t(args.get_int("--seed", 0, 0, INT64_MAX));
  return o;
}

}  // namespace ember::cli
