// ember chat: a multi-turn conversation in the model's chat format, from a
// terminal or a pipe (one user message per input line).
#include <cstdio>
#include <iostream>

#include "cli.hpp"
#include "sampling_args.hpp"

namespace ember::cli {

int cmd_chat(const std::vector<std::string>& argv) {
  std::vector<std::string> flags = {"--model", "--n-predict", "--threads", "--ctx", "--system"};
  flags.insert(flags.end(), kSamplingFlags.begin(), kSamplingFlags.end());
  const Args args(argv, flags, {"--verbose"},
                  {{"-m", "--model"}, {"-n", "--n-predict"}, {"-t", "--threads"}, {"-c", "--ctx"}, {"-v", "--verbose"}});
  const std::string model_path = args.get("--model");
  GenerateOptions gen;
  gen.max_tokens = int32_t(args.get_int("--n-predict", 512, 1, 1 << 24));
  gen.add_bos = false;  // the rendered conversation is tokenized here, with BOS
  Sampler sampler(sampler_options(args));
  SessionOptions session_options;
  session_options.kv.max_tokens = int32_t(args.get_int("--ctx", 4096, 16, 1 << 24));

  auto model = load_model(model_path, int(args.get_int("--threads", 0, 0, 1024)), args.has("--verbose"));
  auto session = model->new_session(session_options);
  std::vector<ChatMessage> messages;
  if (args.has("--system")) messages.push_back({"system", args.get("--system")});

  const bool interactive = stdin_is_terminal();
  if (interactive) std::fprintf(stderr, "chat with %s; end with Ctrl-D or /exit\n", model->info().name.c_str());
  std::string line;
  for (;;) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line.empty()) continue;
    messages.push_back({"user", line});
    const std::string rendered = model->apply_chat_template(messages, true);
    const std::vector<int32_t> ids = model->tokenize(rendered, true, true);

    // Reuse the cached prefix of the conversation; evaluate only what is new.
    const auto cached = session->tokens();
    size_t common = 0;
    while (common < cached.size() && common < ids.size() && cached[common] == ids[common]) ++common;
    if (common == ids.size()) --common;  // keep at least one token to evaluate
    session->rewind(int32_t(common));
    const std::vector<int32_t> rest(ids.begin() + long(common), ids.end());

    const GenerateResult result = session->generate(rest, sampler, gen, [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return Continue;
    });
    std::fputs("\n", stdout);
    std::fflush(stdout);
    messages.push_back({"assistant", result.text});
    if (result.stop_reason == StopReason::context_full) {
      std::fprintf(stderr, "[the context is full; start a new chat]\n");
      break;
    }
  }
  return 0;
}

}  // namespace ember::cli
