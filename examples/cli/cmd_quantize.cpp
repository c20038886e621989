// ember quantize IN OUT --type T [-t THREADS] [--pure]
//                [--method rtn|gptq|awq --calib FILE [--samples N] [--sample-tokens T] [--damp D] [--act-order]]
//                [--budget SIZE | --bpw B] [--sensitivity proxy|kl]
//                [--eval FILE] [--max-ppl-rise R | --no-gate] [--gate-step N] [--gate-rounds N]: writes a quantized GGUF with
// ember::quantize_model, one progress line per tensor on stderr and the report on stdout.
// llama-quantize's positional form `IN OUT TYPE [THREADS]` is accepted too.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"

namespace ember::cli {
namespace {

std::string mib(uint64_t bytes) { return fmt::format("{:.2f} MiB", double(bytes) / (1 << 20)); }

std::string shape_of(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : " x ") + std::to_string(d);
  return s;
}

}  // namespace

int cmd_quantize(const std::vector<std::string>& argv) {
  const std::vector<std::string> flags = {"--type",  "--threads", "--method",     "--calib",    "--samples",
                                          "--sample-tokens", "--damp", "--eval", "--eval-ctx", "--eval-chunks",
                                          "--max-ppl-rise", "--budget", "--bpw", "--sensitivity", "--gate-step",
                                          "--gate-rounds", "--smooth-alpha"};
  const std::vector<std::string> switches = {"--pure", "--no-gate", "--act-order", "--no-awq-clip", "--gptq"};
  // Positional arguments are the ones that are neither a flag nor a flag's value.
  std::vector<std::string> positional, named;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() > 1 && a[0] == '-') {
      named.push_back(a);
      const bool takes_value = a == "-t" || a == "-ngl" || a == "--n-gpu-layers" ||
                               std::find(flags.begin(), flags.end(), a) != flags.end();
      if (takes_value && i + 1 < argv.size()) named.push_back(argv[++i]);
    } else {
      positional.push_back(a);
    }
  }
  const Args args(named, flags, switches, {{"-t", "--threads"}});
  if (positional.size() < 2) throw UsageError("IN and OUT are required");
  if (positional.size() > 4) throw UsageError(fmt::format("unexpected argument '{}'", positional[4]));
  std::string type_name = args.get_or("--type", "");
  if (positional.size() >= 3) {
    if (!type_name.empty()) throw UsageError(fmt::format("the type is given twice ('{}' and --type)", positional[2]));
    type_name = positional[2];
  }
  if (type_name.empty()) throw UsageError("--type is required");
  const std::optional<QuantRecipe> recipe = parse_quant_recipe(type_name);
  if (!recipe)
    throw UsageError(fmt::format("unknown type '{}' (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q4_K_M, Q5_K_M, "
                                 "Q4_G128, Q4_G64, Q8_W, Q8_WR, F16)",
                                 type_name));
  if (*recipe == QuantRecipe::q4_k || *recipe == QuantRecipe::q5_k)
    std::fprintf(stderr, "ember quantize: note: %s here is one K type with the output rule; llama-quantize reads "
                 "%s as %s_M (docs/quantization.md)\n", to_string(*recipe), to_string(*recipe), to_string(*recipe));
  QuantizeOptions options;
  options.recipe = *recipe;
  options.pure = args.has("--pure");
  if (positional.size() == 4) {
    if (args.has("--threads")) throw UsageError("the thread count is given twice");
    char* end = nullptr;
    const long n = std::strtol(positional[3].c_str(), &end, 10);
    if (*end != '\0' || n < 1 || n > 1024) throw UsageError(fmt::format("THREADS must be 1..1024, got '{}'", positional[3]));
    options.threads = int(n);
  } else {
    options.threads = int(args.get_int("--threads", 1, 1, 1024));
  }
  const std::string method = args.get_or("--method", "rtn");
  if (method == "gptq" || method == "awq" || method == "smoothquant") {
    options.method = method == "gptq" ? QuantMethod::gptq : method == "awq" ? QuantMethod::awq : QuantMethod::smoothquant;
    if (method != "smoothquant" && args.has("--smooth-alpha")) throw UsageError("--smooth-alpha is used by --method smoothquant only");
    if (args.has("--smooth-alpha")) {
      const std::string a = args.get("--smooth-alpha");
      char* e = nullptr;
      options.smooth_alpha = a == "auto" ? QuantizeOptions::smooth_alpha_search : std::strtod(a.c_str(), &e);
      if (a != "auto" && (*e != '\0' || !(options.smooth_alpha >= 0 && options.smooth_alpha <= 1)))
        throw UsageError(fmt::format("--smooth-alpha must be in [0, 1] or auto, got '{}'", a));
    }
    if (!args.has("--calib")) throw UsageError(fmt::format("--method {} needs --calib FILE", method));
    if (method != "smoothquant" && args.has("--gptq")) throw UsageError("--gptq is used by --method smoothquant only");
    options.smooth_gptq = args.has("--gptq");
    const bool rounds_by_gptq = method == "gptq" || options.smooth_gptq;
    if (!rounds_by_gptq && args.has("--damp")) throw UsageError("--damp is used by --method gptq only (and by smoothquant with --gptq)");
    if (!rounds_by_gptq && args.has("--act-order"))
      throw UsageError("--act-order is used by --method gptq only (and by smoothquant with --gptq)");
    if (method != "awq" && args.has("--no-awq-clip")) throw UsageError("--no-awq-clip is used by --method awq only");
    options.awq_clip = !args.has("--no-awq-clip");
    options.act_order = args.has("--act-order");
    options.calibration_text = args.get("--calib");
    options.samples = args.get_int("--samples", 512, 1, 1 << 20);
    options.sample_tokens = args.get_int("--sample-tokens", 512, 2, 1 << 16);
    const std::string damp = args.get_or("--damp", "0.01");
    char* end = nullptr;
    options.damp = std::strtod(damp.c_str(), &end);
    if (*end != '\0' || !(options.damp > 0)) throw UsageError(fmt::format("--damp must be > 0, got '{}'", damp));
    options.on_search = [](const SearchProgress& p) {
      std::fprintf(stderr, "\rember quantize: %s, %lld/%lld",
                   std::string_view(p.phase) == "mix" ? "sensitivity of tensor" : "AWQ / SmoothQuant scales, group",
                   static_cast<long long>(p.group), static_cast<long long>(p.groups));
      if (p.group == p.groups) std::fprintf(stderr, "\n");
    };
  } else if (method != "rtn") {
    throw UsageError(fmt::format("unknown method '{}' (rtn, gptq, awq, smoothquant)", method));
  } else if (args.has("--act-order")) {
    throw UsageError("--act-order is used by --method gptq only");
  } else if (args.has("--no-awq-clip")) {
    throw UsageError("--no-awq-clip is used by --method awq only");
  } else if (args.has("--smooth-alpha")) {
    throw UsageError("--smooth-alpha is used by --method smoothquant only");
  } else if (args.has("--gptq")) {
    throw UsageError("--gptq is used by --method smoothquant only");
  } else if (args.has("--calib")) {
    options.calibration_text = args.get("--calib");
    options.samples = args.get_int("--samples", 512, 1, 1 << 20);
    options.sample_tokens = args.get_int("--sample-tokens", 512, 2, 1 << 16);
  }
  if (!options.calibration_text.empty())
    options.on_calibration = [](const CalibrationProgress& p) {
      std::fprintf(stderr, "\rember quantize: calibration sample %lld/%lld", static_cast<long long>(p.sample),
                   static_cast<long long>(p.samples));
      if (p.sample == p.samples) std::fprintf(stderr, "\n");
    };
  if (args.has("--budget") && args.has("--bpw")) throw UsageError("give --budget or --bpw, not both");
  if (args.has("--budget")) {
    // Bytes, or with a K/M/G suffix (powers of 1000).
    std::string v = args.get("--budget");
    double unit = 1;
    if (!v.empty() && std::string("kKmMgG").find(v.back()) != std::string::npos) {
      unit = std::tolower(v.back()) == 'k' ? 1e3 : std::tolower(v.back()) == 'm' ? 1e6 : 1e9;
      v.pop_back();
    }
    char* end = nullptr;
    const double n = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(n > 0) || !std::isfinite(n * unit))
      throw UsageError(fmt::format("--budget must be a size like 200M or 1.2G, got '{}'", args.get("--budget")));
    options.budget_bytes = uint64_t(n * unit);
  }
  if (args.has("--bpw")) {
    char* end = nullptr;
    const std::string v = args.get("--bpw");
    options.target_bpw = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(options.target_bpw > 0 && options.target_bpw <= 32))
      throw UsageError(fmt::format("--bpw must be bits per weight in (0, 32], got '{}'", v));
  }
  if (options.budget_bytes > 0 || options.target_bpw > 0 || options.method != QuantMethod::rtn || args.has("--sensitivity")) {
    const bool smooth = options.method == QuantMethod::smoothquant;
    options.on_search = [smooth](const SearchProgress& p) {
      const std::string_view phase(p.phase);
      std::fprintf(stderr, "\rember quantize: %s %lld/%lld",
                   phase == "kl"    ? "KL sensitivity (one tensor quantized), tensor"
                   : phase == "mix" ? "sensitivity of tensor"
                   : smooth         ? "SmoothQuant scales, group"
                                    : "AWQ scale search, group",
                   static_cast<long long>(p.group), static_cast<long long>(p.groups));
      if (p.group == p.groups) std::fprintf(stderr, "\n");
    };
  }
  // Measured sensitivity needs the calibration text's first windows.
  const std::string sensitivity = args.get_or("--sensitivity", "proxy");
  if (sensitivity == "kl") {
    if (!args.has("--calib")) throw UsageError("--sensitivity kl needs --calib FILE");
    options.sensitivity = Sensitivity::kl;
  } else if (sensitivity != "proxy") {
    throw UsageError(fmt::format("unknown sensitivity '{}' (proxy, kl)", sensitivity));
  }
  // Evaluation: --eval FILE, else the held-out tail of --calib FILE when the gate is on.
  const bool gate = !args.has("--no-gate");
  const bool can_eval = args.has("--eval") || (args.has("--calib") && gate);
  if (!args.has("--eval") && !args.has("--calib") &&
      (args.has("--eval-ctx") || args.has("--eval-chunks") || args.has("--max-ppl-rise")))
    throw UsageError("--eval-ctx, --eval-chunks and --max-ppl-rise need --eval FILE or --calib FILE (whose tail is held out)");
  if (!gate && (args.has("--max-ppl-rise") || args.has("--gate-step") || args.has("--gate-rounds")))
    throw UsageError("--no-gate excludes --max-ppl-rise, --gate-step and --gate-rounds");
  if (args.has("--calib") && method == "rtn" && !args.has("--budget") && !args.has("--bpw") && sensitivity != "kl" && !gate)
    throw UsageError("--calib is read by --method gptq and awq, --budget/--bpw, --sensitivity kl and the gate's "
                     "held-out evaluation; with --no-gate nothing here reads it");
  if (can_eval) {
    options.eval_text = args.get_or("--eval", "");
    options.eval_ctx = int32_t(args.get_int("--eval-ctx", 512, 8, 1 << 20));
    options.eval_chunks = args.get_int("--eval-chunks", -1, -1, 1 << 30);
    options.on_eval = [](int model, int64_t c, int64_t n) {
      std::fprintf(stderr, "\rember quantize: perplexity of the %s, chunk %lld/%lld", model == 0 ? "input " : "output",
                   static_cast<long long>(c), static_cast<long long>(n));
      if (c == n) std::fprintf(stderr, "\n");
    };
  }
  if (can_eval && gate) {
    // "5%" or "0.05"; 0 switches the gate off (the figures are still reported with --eval).
    options.max_ppl_rise = 0.05;
    if (args.has("--max-ppl-rise")) {
      std::string rise = args.get("--max-ppl-rise");
      const bool percent = !rise.empty() && rise.back() == '%';
      if (percent) rise.pop_back();
      char* end = nullptr;
      const double v = std::strtod(rise.c_str(), &end);
      if (rise.empty() || *end != '\0' || !(v >= 0) || !std::isfinite(v))
        throw UsageError(fmt::format("--max-ppl-rise must be a fraction or percentage >= 0, got '{}'",
                                     args.get("--max-ppl-rise")));
      options.max_ppl_rise = percent ? v / 100.0 : v;
    }
    options.gate_step = int(args.get_int("--gate-step", 0, 1, 1 << 20));
    options.gate_max_rounds = int(args.get_int("--gate-rounds", 0, 1, 1 << 20));
    options.on_gate = [](const GateRound& r) {
      std::string raised;
      for (const RaisedTensor& t : r.raised)
        raised += fmt::format("{}{} {}->{}", raised.empty() ? "" : ", ", t.name, t.from, t.to);
      std::fprintf(stderr, "ember quantize: gate round %d: raised %zu (%s); perplexity %.4f (%+.2f%%)\n", r.round,
                   r.raised.size(), raised.c_str(), r.perplexity, 100.0 * r.rise);
    };
  }
  const std::string& in = positional[0];
  const std::string& out = positional[1];
  options.on_tensor = [](const QuantizeProgress& p) {
    const QuantizedTensor& t = *p.tensor;
    const std::string awq = (t.awq ? fmt::format(" ({} alpha {:.2f}{})",
                                                  t.smooth_statistic.empty() ? "awq"
                                                  : t.smooth_statistic == "none"
                                                      ? "smoothquant: none,"
                                                      : "smoothquant " + t.smooth_statistic + ",",
                                                  t.awq_alpha,
                                                  t.quantized && t.awq_clipped > 0
                                                      ? fmt::format(", {:.0f}% of blocks clipped", 100.0 * t.awq_clipped)
                                                      : "")
                                   : "") +
                            (t.mixed ? fmt::format(" (mixed, sensitivity {:.2e})", t.sensitivity) : "");
    std::string what = t.quantized ? fmt::format("{} -> {}{}{}{}, rel. error {:.5f}", t.type_in, t.type_out,
                                                  t.gptq ? " (gptq)" : "", awq, t.fallback ? " (fallback)" : "",
                                                  t.relative_error)
                     : t.awq       ? fmt::format("{} -> {}{}, divided by the scales", t.type_in, t.type_out, awq)
                                   : fmt::format("{}, copied", t.type_out);
    std::fprintf(stderr, "[%4zu/%4zu] %-32s %-16s %s, %s -> %s\n", p.index + 1, p.count, t.name.c_str(),
                 shape_of(t.shape).c_str(), what.c_str(), mib(t.bytes_in).c_str(), mib(t.bytes_out).c_str());
  };
  std::fprintf(stderr, "ember quantize: %s -> %s, %s%s%s, %d thread%s\n", in.c_str(), out.c_str(), to_string(*recipe),
               options.pure ? " (pure)" : "", options.method == QuantMethod::gptq  ? ", GPTQ"
                                                          : options.method == QuantMethod::awq ? ", AWQ"
                                                                                                : "",
               options.threads,
               options.threads == 1 ? "" : "s");
  const QuantizeReport report = quantize_model(in, out, options);
  for (const std::string& w : report.warnings) std::fprintf(stderr, "ember quantize: warning: %s\n", w.c_str());
  if (!report.converted_from.empty())
    std::printf("input: the Hugging Face checkpoint '%s', converted to GGUF first (ember convert's rules)\n",
                report.converted_from.c_str());

  // The report: one line per tensor, then per output type, then totals.
  std::printf("%-32s %-16s %-6s %-6s %12s %12s %10s\n", "tensor", "shape", "in", "out", "bytes in", "bytes out", "rel.err");
  struct PerType {
    size_t count = 0;
    uint64_t bytes = 0;
  };
  std::map<std::string, PerType> per_type;
  for (const QuantizedTensor& t : report.tensors) {
    std::printf("%-32s %-16s %-6s %-6s %12llu %12llu %10s%s\n", t.name.c_str(), shape_of(t.shape).c_str(),
                t.type_in.c_str(), t.type_out.c_str(), static_cast<unsigned long long>(t.bytes_in),
                static_cast<unsigned long long>(t.bytes_out),
                t.quantized ? fmt::format("{:.5f}", t.relative_error).c_str() : "-", t.fallback ? " fallback" : "");
    PerType& p = per_type[t.type_out];
    ++p.count;
    p.bytes += t.bytes_out;
  }
  std::printf("\nby type:\n");
  for (const auto& [type, p] : per_type) std::printf("  %-6s %4zu tensors %12s\n", type.c_str(), p.count, mib(p.bytes).c_str());
  std::printf("\ntotal: %zu tensors, data %s -> %s (%.2f%%), file %s, relative error %.5f, general.file_type %u\n",
              report.tensors.size(), mib(report.bytes_in).c_str(), mib(report.bytes_out).c_str(),
              report.bytes_in ? 100.0 * double(report.bytes_out) / double(report.bytes_in) : 0.0,
              mib(report.file_bytes).c_str(), report.relative_error, report.file_type);
  if (options.method == QuantMethod::gptq)
    std::printf("gptq: calibrated on %lld samples, %lld tokens of '%s', damp %g%s\n",
                static_cast<long long>(report.calibration_samples), static_cast<long long>(report.calibration_tokens),
                options.calibration_text.c_str(), options.damp, options.act_order ? ", act-order" : "");
  if (report.budget_bytes > 0)
    std::printf("mixed precision: budget %s, tensor data %s\n", mib(report.budget_bytes).c_str(),
                mib(report.bytes_out).c_str());
  if (report.kl_windows > 0) {
    // The measured sensitivities, most sensitive first, with the type each tensor got.
    std::printf("\nsensitivity (KL divergence, nats/token, with the tensor alone quantized; %lld windows, %lld tokens, "
                "%lld positions scored):\n",
                static_cast<long long>(report.kl_windows), static_cast<long long>(report.kl_tokens),
                static_cast<long long>(report.kl_positions));
    std::vector<const QuantizedTensor*> ranked;
    for (const QuantizedTensor& t : report.tensors)
      if (t.kl >= 0) ranked.push_back(&t);
    std::stable_sort(ranked.begin(), ranked.end(), [](auto* a, auto* b) { return a->kl > b->kl; });
    for (const QuantizedTensor* t : ranked)
      std::printf("  %-32s KL %.3e in %-5s -> %s%s\n", t->name.c_str(), t->kl, t->kl_type.c_str(), t->type_out.c_str(),
                  t->mixed ? " (mixed)" : "");
  }
  if (report.ppl_before > 0) {
    const double rise = 100.0 * (report.ppl_after / report.ppl_before - 1.0);
    const std::string source = options.eval_text.empty()
                                   ? fmt::format("the held-out last {} tokens of '{}'", report.held_out_tokens,
                                                 options.calibration_text)
                                   : fmt::format("'{}'", options.eval_text);
    std::printf("perplexity of %s (%lld tokens scored, --eval-ctx %d): input %.4f +/- %.4f, output %.4f +/- %.4f "
                "(%+.2f%%)\n",
                source.c_str(), static_cast<long long>(report.eval_scored), options.eval_ctx, report.ppl_before,
                report.ppl_before_error, report.ppl_after, report.ppl_after_error, rise);
    if (!report.gate_rounds.empty()) {
      std::printf("gate (--max-ppl-rise %.2f%%): first output %.4f (%+.2f%%), %zu rounds\n", 100.0 * report.max_ppl_rise,
                  report.ppl_first, 100.0 * (report.ppl_first / report.ppl_before - 1.0), report.gate_rounds.size());
      for (const GateRound& r : report.gate_rounds) {
        std::printf("  round %d: perplexity %.4f +/- %.4f (%+.2f%%) after raising\n", r.round, r.perplexity, r.error,
                    100.0 * r.rise);
        for (const RaisedTensor& t : r.raised)
          std::printf("    %-32s %s -> %s (ranked by %s %.3e)\n", t.name.c_str(), t.from.c_str(), t.to.c_str(),
                      report.kl_windows > 0 ? "KL" : "relative error", t.rank_key);
      }
    }
    if (report.rejected) {
      std::fprintf(stderr,
                   "ember quantize: the perplexity rose by %.2f%%, more than --max-ppl-rise %.2f%%, %s: %s was not "
                   "written\n",
                   rise, 100.0 * options.max_ppl_rise,
                   report.gate_rounds.empty() ? "and nothing could be raised"
                   : options.gate_max_rounds > 0 && int(report.gate_rounds.size()) >= options.gate_max_rounds
                       ? fmt::format("after {} rounds (--gate-rounds)", report.gate_rounds.size()).c_str()
                       : "even with every quantized tensor raised to its widest type",
                   out.c_str());
      return 1;
    }
  }
  if (options.method == QuantMethod::awq) {
    std::printf("awq: calibrated on %lld samples, %lld tokens of '%s'\n", static_cast<long long>(report.calibration_samples),
                static_cast<long long>(report.calibration_tokens), options.calibration_text.c_str());
    for (const std::string& s : report.awq_skipped) std::printf("awq: round-to-nearest for %s\n", s.c_str());
  }
  return 0;
}

}  // namespace ember::cli
