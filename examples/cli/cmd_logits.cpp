// ember logits: float32 [n_tokens][vocab] logits of a token list, the layout of
// the golden files in ../shared/golden.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli.hpp"

namespace ember::cli {

int cmd_logits(const std::vector<std::string>& argv) {
  const Args args(argv, {"--model", "--tokens", "--output", "--threads"}, {"--verbose"},
                  {{"-m", "--model"}, {"-o", "--output"}, {"-t", "--threads"}, {"-v", "--verbose"}});
  const std::string model_path = args.get("--model");
  const std::string output = args.get("--output");
  std::vector<int32_t> tokens;
  {
    std::istringstream in(args.get("--tokens"));
    std::string word;
    while (in >> word) {
      char* end = nullptr;
      const long id = std::strtol(word.c_str(), &end, 10);
      if (*end != '\0' || id < 0 || id > INT32_MAX) throw UsageError(fmt::format("bad token id '{}'", word));
      tokens.push_back(int32_t(id));
    }
  }
  if (tokens.empty()) throw UsageError("--tokens is empty");
  const int threads = int(args.get_int("--threads", 0, 0, 1024));

  auto model = load_model(model_path, threads, args.has("--verbose"));
  SessionOptions options;
  options.kv.max_tokens = int32_t(std::max<size_t>(tokens.size(), 16));
  auto session = model->new_session(options);

  std::ofstream out(output, std::ios::binary);
  if (!out) throw Error(ErrorCode::io, fmt::format("cannot write '{}'", output));
  size_t rows = 0;
  session->evaluate(tokens, [&](size_t, std::span<const float> row) {
    // The host is little-endian (x86-64 / AArch64): rows are written as they are.
    out.write(reinterpret_cast<const char*>(row.data()), std::streamsize(row.size() * sizeof(float)));
    ++rows;
  });
  out.close();
  if (!out) throw Error(ErrorCode::io, fmt::format("writing '{}' failed", output));
  std::fprintf(stderr, "wrote %zu x %lld logits to %s\n", rows, static_cast<long long>(model->info().n_vocab),
               output.c_str());
  return 0;
}

}  // namespace ember::cli
