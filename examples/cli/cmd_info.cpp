// ember info: what a model is and what it costs in memory.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cli.hpp"

namespace ember::cli {

int cmd_info(const std::vector<std::string>& argv) {
  const Args args(argv, {"--model", "--threads"}, {"--verbose"},
                  {{"-m", "--model"}, {"-t", "--threads"}, {"-v", "--verbose"}});
  // Loading starts no thread: the pool starts with the first session, which info never makes.
  const std::string path = args.get("--model");
  const int threads = int(args.get_int("--threads", 0, 0, 1024));
  std::shared_ptr<Model> model;
  try {
    model = load_model(path, threads, args.has("--verbose"));
  } catch (const Error& e) {
    // A file ember cannot run: say everything that is missing, not only the first.
    if (e.code() != ErrorCode::unsupported) throw;
    const ModelSupport support = Model::inspect(path);
    std::string out = fmt::format("architecture:     {}\n", support.architecture.empty() ? "(none)" : support.architecture);
    out += fmt::format("tokenizer:        {}{}\n", support.tokenizer.empty() ? "(none)" : support.tokenizer,
                       support.pre_tokenizer.empty() ? "" : fmt::format(", pre-tokenizer {}", support.pre_tokenizer));
    out += "ember cannot run this file:\n";
    for (const std::string& reason : support.missing) out += "  " + reason + "\n";
    if (support.missing.empty()) out += fmt::format("  {}\n", e.what());
    std::fputs(out.c_str(), stdout);
    return 1;
  }
  const ModelInfo& i = model->info();
  const double mib = 1024.0 * 1024.0;
  std::string out;
  out += fmt::format("model:            {}\n", i.name.empty() ? "(unnamed)" : i.name);
  out += fmt::format("architecture:     {}\n", i.architecture);
  out += fmt::format("vocabulary:       {} tokens ({} tokenizer)\n", i.n_vocab, i.tokenizer.empty() ? "no" : i.tokenizer);
  if (i.tokenizer == "bpe")
    out += fmt::format("pre-tokenizer:    {}\n", i.pre_tokenizer.empty() ? "(none: the default rules)" : i.pre_tokenizer);
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
  // Bytes per cached token in every layer; sliding-window layers hold at most their
  // window, so a long context costs less than tokens x this figure.
  out += "KV cache per token (all layers):\n";
  const struct {
    const char* name;
    KVStorage storage;
    int32_t group;
  } kinds[] = {{"f32", KVStorage::f32, 32},       {"f16", KVStorage::f16, 32},       {"int8 g32", KVStorage::int8, 32},
               {"int8 g64", KVStorage::int8, 64}, {"int4 g32", KVStorage::int4, 32}, {"int4 g64", KVStorage::int4, 64},
               {"int4o g32", KVStorage::int4o, 32}, {"int4o g64", KVStorage::int4o, 64},
               {"k8v4 g32", KVStorage::k8v4, 32},   {"k8v4 g64", KVStorage::k8v4, 64}};
  const size_t f16_bytes = model->kv_bytes_per_token(KVStorage::f16);
  for (const auto& k : kinds) {
    const size_t b = model->kv_bytes_per_token(k.storage, k.group);
    if (b == 0) {
      out += fmt::format("  {:<10} does not fit a head of {}\n", k.name, i.head_dim);
      continue;
    }
    out += fmt::format("  {:<10} {:>8} bytes ({:.2f}x f16), {:.1f} MiB for 4096 tokens\n", k.name, b,
                       double(b) / double(f16_bytes), double(b) * 4096 / mib);
  }
  // What the model's KV pool reserves (address space; pages are committed when
  // written and handed back when the sessions using them end).
  out += fmt::format("KV pool (f16):    {:.1f} MiB reserved on first use, {:.0f} tokens of every layer\n",
                     double(model->kv_pool_bytes()) / mib,
                     double(model->kv_pool_bytes()) / double(std::max<size_t>(f16_bytes, 1)));
  out += fmt::format("threads:          {} (ModelOptions::threads 0 = physical cores)\n", model->threads());
  if (const std::string level = model->cpu_kernel_level(); !level.empty()) {
    const char* forced = std::getenv("EMBER_CPU_ISA");
    out += fmt::format("cpu kernels:      {} ({})\n", level,
                       forced && *forced ? "EMBER_CPU_ISA" : "the best this CPU runs; EMBER_CPU_ISA picks a lower level");
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace ember::cli
