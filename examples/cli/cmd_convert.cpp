// ember convert DIR OUT [--type auto|f32|f16|bf16]: writes a GGUF from a Hugging Face
// checkpoint folder with ember::convert_hf_checkpoint, a progress bar on stderr and a
// summary on stdout.
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli.hpp"

namespace ember::cli {

int cmd_convert(const std::vector<std::string>& argv) {
  std::vector<std::string> positional, named;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i].size() > 1 && argv[i][0] == '-') {
      named.push_back(argv[i]);
      if ((argv[i] == "--type" || argv[i] == "-ngl" || argv[i] == "--n-gpu-layers") && i + 1 < argv.size())
        named.push_back(argv[++i]);
    } else {
      positional.push_back(argv[i]);
    }
  }
  const Args args(named, {"--type"}, {}, {});
  if (positional.size() != 2) throw UsageError("DIR and OUT are required");
  ConvertOptions options;
  const std::string type = args.get_or("--type", "auto");
  if (type == "auto") options.type = ConvertType::automatic;
  else if (type == "f32" || type == "F32") options.type = ConvertType::f32;
  else if (type == "f16" || type == "F16") options.type = ConvertType::f16;
  else if (type == "bf16" || type == "BF16") options.type = ConvertType::bf16;
  else throw UsageError(fmt::format("unknown --type '{}' (auto, f32, f16, bf16)", type));
  ProgressBar bar("convert");
  options.progress = [&](const ConvertProgress& p) { bar.update(double(p.tensor) / double(p.tensors)); };
  const ConvertReport r = convert_hf_checkpoint(positional[0], positional[1], options);
  bar.done();
  for (const std::string& w : r.warnings) std::fprintf(stderr, "ember convert: warning: %s\n", w.c_str());
  std::printf("%s (%s) -> %s: %lld tensors (%lld skipped), matrices %s, %lld tokens, %.2f MiB\n",
              positional[0].c_str(), r.hf_architecture.c_str(), positional[1].c_str(), (long long)r.tensors,
              (long long)r.skipped, to_string(r.type), (long long)r.n_vocab, double(r.file_bytes) / (1 << 20));
  return 0;
}

}  // namespace ember::cli
