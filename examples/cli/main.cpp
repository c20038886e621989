// ember: command-line front end of the library.
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli.hpp"

namespace {

constexpr const char* kUsage = R"(usage: ember <command> [options]

commands:
  run         -m MODEL -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P]
              [--repeat-penalty R] [--seed S] [-t THREADS] [--ctx N] [--chat] [KV options]
              stream a continuation of PROMPT (with --chat: as one user turn)
  chat        -m MODEL [-n N] [--system TEXT] [--temp T] [--seed S] [-t THREADS] [--ctx N]
              interactive multi-turn chat in the model's chat format (terminal or pipe)
  perplexity  -m MODEL -f FILE [--ctx N] [-t THREADS] [KV options]
              perplexity of a text, scored like llama-perplexity
              --stream [--tokens N] [--batch 16] [--segment 1000] [--restart N] [--csv FILE]:
              read the text as one stream through a bounded cache, perplexity per segment
  bench       -m MODEL [-p 512] [-n 64] [-d 0] [-t THREADS] [-r 3] [--kv-type T] [--json]
              prefill and decode speed (as llama-bench; -p -n -d -t take comma lists,
              -d: tokens already in the cache when the measurement starts)
  batched-bench -m MODEL [-npp 128] [-ntg 128] [-npl 1,2,4,8,16] [-t THREADS] [-r 1] [--json]
              aggregate speed of N concurrent requests through the Engine (as llama-batched-bench)
  logits      -m MODEL --tokens "1 5 9" -o FILE [-t THREADS]
              write float32 [n_tokens][vocab] logits, row-major little-endian
  tokenize    -m MODEL -p TEXT [--bos] [--special]
              print token ids (no BOS unless --bos; special tokens only with --special)
  info        -m MODEL
              architecture, hyper-parameters, tensor types and memory use
  version     print the version

KV options (run, perplexity; bench: --kv-type, --kv-group):
  --kv-type f16|f32|int8|int4   storage of keys and values (default f16)
  --kv-group 32|64              values per scale for int8/int4 (default 32)
  --evict none|streaming|h2o    policy when the cache is full (default none: error)
  --sinks N --window N          streaming: keep N first tokens + the last N (4, 1020)
  --heavy N --recent N          h2o: keep N most-attended + the last N (128, 128)

Wrong arguments exit with code 2, errors with code 1.
)";

}  // namespace

int main(int argc, char** argv) {
  using namespace ember::cli;
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (command == "run") return cmd_run(args);
    if (command == "chat") return cmd_chat(args);
    if (command == "perplexity") return cmd_perplexity(args);
    if (command == "bench") return cmd_bench(args);
    if (command == "batched-bench") return cmd_batched_bench(args);
    if (command == "logits") return cmd_logits(args);
    if (command == "tokenize") return cmd_tokenize(args);
    if (command == "info") return cmd_info(args);
    if (command == "version" || command == "--version") {
      std::printf("ember %s (API %d)\n", ember::version_string(), ember::api_version());
      return 0;
    }
    if (command == "help" || command == "--help" || command == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    throw UsageError(fmt::format("unknown command '{}'", command));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ember: %s\n\n%s", e.what(), kUsage);
    return 2;
  } catch (const ember::Error& e) {
    std::fprintf(stderr, "ember: error (%s): %s\n", ember::to_string(e.code()), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: error: %s\n", e.what());
    return 1;
  }
}
