// Speculative-decoding flags of `ember run` and `ember bench`, with llama.cpp's
// spellings: -md/--model-draft FILE, --draft-max K, --draft-min K, --draft-p-min P,
// and ember's --draft lookup|model|self-..., --draft-adaptive on|off. Self drafts
// combine with '+': --draft self-vocab:16384+self-skip:0-11 (layers: a, a-b, commas).
#pragma once

#include <fmt/format.h>

#include <cstdlib>

#include "cli.hpp"

namespace ember::cli {

inline const std::vector<std::string> kSpeculativeFlags = {"--model-draft", "--draft-max", "--draft-min",
                                                           "--draft-p-min", "--draft", "--draft-adaptive"};
inline const std::map<std::string, std::string> kSpeculativeAliases = {
    {"-md", "--model-draft"}, {"--draft-n", "--draft-max"}, {"--draft-n-min", "--draft-min"}};

// The options the flags ask for (kind none without -md or --draft). Loads the draft
// model with the target's threads.
inline SpeculativeOptions speculative_options(const Args& args, int threads, bool verbose) {
  SpeculativeOptions o;
  std::string kind = args.get_or("--draft", args.has("--model-draft") ? "model" : "");
  if (kind.empty()) {
    if (args.has("--draft-max") || args.has("--draft-min") || args.has("--draft-p-min") ||
        args.has("--draft-adaptive"))
      throw UsageError("--draft-max, --draft-min, --draft-p-min and --draft-adaptive need -md FILE or --draft KIND");
    return o;
  }
  if (kind == "lookup") {
    o.kind = DraftKind::lookup;
  } else if (kind.starts_with("self-")) {
    o.kind = DraftKind::self;
    for (size_t at = 0; at <= kind.size();) {
      const size_t end = std::min(kind.find('+', at), kind.size());
      const std::string part = kind.substr(at, end - at);
      at = end + 1;
      auto number = [&](const std::string& text) {
        char* stop = nullptr;
        const long v = std::strtol(text.c_str(), &stop, 10);
        if (text.empty() || *stop != '\0' || v < 0) throw UsageError(fmt::format("--draft {}: '{}' is not a number", kind, text));
        return int32_t(v);
      };
      if (part == "self-lowbit") {
        o.self_lowbit = true;
      } else if (part.starts_with("self-vocab:")) {
        o.self_vocab = number(part.substr(11));
      } else if (part.starts_with("self-skip:")) {
        // The layers the draft keeps: "0-8,12".
        const std::string list = part.substr(10);
        for (size_t p = 0; p <= list.size();) {
          const size_t comma = std::min(list.find(',', p), list.size());
          const std::string item = list.substr(p, comma - p);
          p = comma + 1;
          const size_t dash = item.find('-');
          const int32_t lo = number(item.substr(0, dash));
          const int32_t hi = dash == std::string::npos ? lo : number(item.substr(dash + 1));
          for (int32_t l = lo; l <= hi; ++l) o.self_layers.push_back(l);
        }
      } else {
        throw UsageError(fmt::format("--draft: unknown self draft '{}' (self-lowbit, self-skip:LAYERS, self-vocab:N)", part));
      }
    }
  } else if (kind == "model") {
    if (!args.has("--model-draft")) throw UsageError("--draft model needs -md FILE");
    o.kind = DraftKind::model;
  } else {
    throw UsageError(fmt::format("--draft must be lookup, model or self-..., got '{}'", kind));
  }
  o.draft_max = int32_t(args.get_int("--draft-max", 4, 1, 16));
  o.draft_min = int32_t(args.get_int("--draft-min", 1, 1, o.draft_max));
  o.draft_p_min = float(args.get_double("--draft-p-min", 0.0, 0.0, 1.0));
  const std::string adaptive = args.get_or("--draft-adaptive", "on");
  if (adaptive != "on" && adaptive != "off") throw UsageError("--draft-adaptive must be on or off");
  o.adaptive = adaptive == "on";
  if (o.kind == DraftKind::model) o.draft_model = load_model(args.get("--model-draft"), threads, verbose);
  return o;
}

// ", drafts: 120 proposed, 96 accepted (80 %, alpha 0.84), 3.40 tokens a step, k 6, 30 verify steps (2.1 + 24.0 ms),
// 12 plain steps (19.5 ms)": per step, the mean drafting and verification times.
inline std::string describe_speculation(const SpeculativeMetrics& s) {
  if (s.steps == 0 && s.plain_steps == 0) return "";
  const auto per = [](double seconds, int64_t n) { return n > 0 ? 1e3 * seconds / double(n) : 0.0; };
  return fmt::format(
      ", drafts: {} proposed, {} accepted ({:.0f} %, alpha {:.2f}), {:.2f} tokens a step, k {}, {} verify steps ({:.1f} "
      "+ {:.1f} ms), {} plain steps ({:.1f} ms)",
      s.drafted, s.accepted, 100.0 * s.acceptance_rate(), s.draft_acceptance(), s.mean_accepted_per_step(),
      s.current_k, s.steps,
      per(s.draft_seconds, s.steps), per(s.verify_seconds, s.steps), s.plain_steps, per(s.plain_seconds, s.plain_steps));
}

}  // namespace ember::cli
