// ember tokenize: the ids of a text, space-separated.
#include <cstdio>

#include "cli.hpp"

namespace ember::cli {

int cmd_tokenize(const std::vector<std::string>& argv) {
  const Args args(argv, {"--model", "--prompt"}, {"--bos", "--special", "--verbose"},
                  {{"-m", "--model"}, {"-p", "--prompt"}, {"-v", "--verbose"}});
  const std::string model_path = args.get("--model");
  const std::string text = args.get("--prompt");
  auto model = load_model(model_path, 1, args.has("--verbose"), /*vocab_only=*/true);
  const auto ids = model->tokenize(text, args.has("--bos"), args.has("--special"));
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace ember::cli
