// ember run: stream a continuation of a prompt.
#include <cstdio>

#include "cli.hpp"
#include "sampling_args.hpp"
#include "speculative_args.hpp"

namespace ember::cli {

int cmd_run(const std::vector<std::string>& argv) {
  std::vector<std::string> flags = {"--model", "--prompt", "--file", "--n-predict", "--threads", "--ctx"};
  flags.insert(flags.end(), kSamplingFlags.begin(), kSamplingFlags.end());
  flags.insert(flags.end(), kKVFlags.begin(), kKVFlags.end());
  flags.insert(flags.end(), kSpeculativeFlags.begin(), kSpeculativeFlags.end());
  std::map<std::string, std::string> aliases = {{"-m", "--model"}, {"-p", "--prompt"}, {"-n", "--n-predict"},
                                                {"-t", "--threads"}, {"-c", "--ctx"},   {"-v", "--verbose"}};
  aliases.insert(kSpeculativeAliases.begin(), kSpeculativeAliases.end());
  const Args args(argv, flags, {"--chat", "--verbose", "--ignore-eos", "--escape", "--no-display-prompt"}, aliases);
  const std::string model_path = args.get("--model");
  if (args.has("--prompt") == args.has("--file")) throw UsageError("give the prompt with -p TEXT or -f FILE (one of them)");
  std::string prompt;
  if (args.has("--file")) {
    prompt = read_text_file(args.get("--file"), "prompt file");
  } else {
    prompt = args.get("--prompt");
  }
  if (args.has("--escape")) prompt = process_escapes(prompt);
  GenerateOptions gen;
  gen.max_tokens = int32_t(args.get_int("--n-predict", 128, 0, 1 << 24));
  gen.stop_at_end_of_generation = !args.has("--ignore-eos");
  Sampler sampler(sampler_options(args));
  SessionOptions session_options;
  session_options.kv.max_tokens = int32_t(args.get_int("--ctx", 4096, 1, 1 << 24));
  apply_kv_args(args, session_options.kv);

  const int threads = int(args.get_int("--threads", 0, 0, 1024));
  auto model = load_model(model_path, threads, args.has("--verbose"));
  gen.speculative = speculative_options(args, threads, args.has("--verbose"));
  if (args.has("--chat")) {
    const ChatMessage turn{"user", prompt};
    prompt = model->apply_chat_template(std::span(&turn, 1), true);
  }
  auto session = model->new_session(session_options);
  if (!args.has("--chat") && !args.has("--no-display-prompt")) {
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  const GenerateResult result = session->generate(prompt, sampler, gen, [](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return Continue;
  });
  std::fputs("\n", stdout);
  const GenerationMetrics& m = result.metrics;
  std::fprintf(stderr, "[%d prompt tokens at %.1f tok/s, %d generated at %.1f tok/s, stop: %s%s]\n", m.prompt_tokens,
               m.prefill_tokens_per_second(), m.generated_tokens, m.decode_tokens_per_second(),
               to_string(result.stop_reason), describe_speculation(result.speculative).c_str());
  return 0;
}

}  // namespace ember::cli
