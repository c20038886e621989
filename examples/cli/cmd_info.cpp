// ember info: what a model is and what it costs in memory.
#include <fmt/format.h>

#include <cstdio>

#include "cli.hpp"

namespace ember::cli {

int cmd_info(const std::vector<std::string>& argv) {
  const Args args(argv, {"--model"}, {"--verbose"}, {{"-m", "--model"}, {"-v", "--verbose"}});
  auto model = load_model(args.get("--model"), 1, args.has("--verbose"));
  const ModelInfo& i = model->info();
  const double mib = 1024.0 * 1024.0;
  std::string out;
  out += fmt::format("model:            {}\n", i.name.empty() ? "(unnamed)" : i.name);
  out += fmt::format("architecture:     {}\n", i.architecture);
  out += fmt::format("vocabulary:       {} tokens ({} tokenizer)\n", i.n_vocab, i.tokenizer.empty() ? "no" : i.tokenizer);
  out += fmt::format("context (train):  {}\n", i.n_ctx_train);
  out += fmt::format("layers:           {}\n", i.n_layer);
  out += fmt::format("embedding:        {}\n", i.n_embd);
  out += fmt::format("feed-forward:     {}\n", i.n_ff);
  out += fmt::format("attention heads:  {} query, {} key/value, head size {}\n", i.n_head, i.n_head_kv, i.head_dim);
  if (i.n_sliding_layers > 0)
    out += fmt::format("sliding window:   {} tokens on {} of {} layers\n", i.sliding_window, i.n_sliding_layers,
                       i.n_layer);
  out += fmt::format("chat format:      {}\n", i.chat_template.empty() ? "none" : i.chat_template);
  out += "tensor types:    ";
  for (const auto& [type, count] : i.tensor_types) out += fmt::format(" {} x{}", type, count);
  out += "\n";
  out += fmt::format("file size:        {:.1f} MiB\n", double(i.file_bytes) / mib);
  out += fmt::format("weights:          {:.1f} MiB\n", double(i.weight_bytes) / mib);
  out += fmt::format("KV cache (F16):   {:.1f} KiB per token, {:.1f} MiB for 4096 tokens\n",
                     double(i.kv_bytes_per_token) / 1024.0, double(i.kv_bytes_per_token) * 4096 / mib);
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace ember::cli
