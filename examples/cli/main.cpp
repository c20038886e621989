// ember: command-line front end of the library.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string_view>
#include <string>
#include <vector>

#include "cli.hpp"

namespace {

using ember::cli::cmd_batched_bench;

struct Command {
  const char* name;
  int (*run)(const std::vector<std::string>&);
  const char* usage;  // "ember NAME ..." lines and a description; printed for -h and wrong arguments
};

constexpr const char* kKVUsage = R"(
KV options:
  --kv-type f16|f32|int8|int4|int4o|k8v4  storage of keys and values (default f16;
                                int4o: int4 + 2 values per group kept as f16;
                                k8v4: int8 keys, int4 values)
  -ctk, -ctv f16|f32|q8_0|q4_1  llama.cpp's spelling of the same (keys and values agree)
  --kv-group 32|64              values per scale for int8/int4/int4o/k8v4 (default 32)
  --kv-exact N                  int8/int4/int4o/k8v4: keep the newest N tokens also in
                                f16 and attend to them exactly (default 0; 16 for int4:
                                docs/kv-cache.md); needs --evict none
  --evict none|streaming|h2o    policy when the cache is full (default none: error)
  --sinks N --window N          streaming: keep N first tokens + the last N (4, 1020)
  --heavy N --recent N          h2o: keep N most-attended + the last N (128, 128)
)";

constexpr const char* kSamplingUsage = R"(
sampling options:
  --temp T (0.8)  --top-k K (40)  --top-p P (0.95)  --min-p P (0.05)  -s, --seed S
  --repeat-penalty R (1)  --repeat-last-n N (64)  --presence-penalty P (0)
  --freq-penalty P, --frequency-penalty P (0)
)";

const std::vector<Command>& commands() {
  static const std::vector<Command> list = {
      {"run", ember::cli::cmd_run, R"(ember run -m MODEL (-p PROMPT | -f FILE) [-n N] [-t THREADS] [-c CTX] [--chat]
          [-e] [--no-display-prompt] [--ignore-eos] [sampling options] [KV options]
  Streams a continuation of PROMPT (with --chat: the reply to it as one user turn).
  -m, --model FILE       GGUF model
  -p, --prompt TEXT      the prompt;  -f, --file FILE: read it from a file
  -n, --n-predict N      tokens to generate (default 128)
  -t, --threads N        threads (default 0: the physical cores)
  -c, --ctx, --ctx-size N  context length (default 4096)
  -e, --escape           process \n \t \\ \" \xHH escapes in the prompt
  --no-display-prompt    do not echo the prompt
speculative decoding (lossless: the same tokens as without it):
  -md, --model-draft FILE  draft with a smaller model of the same vocabulary
  --draft lookup|model|self-...  lookup: continue n-grams seen in the prompt and the output;
                           self-vocab:N, self-skip:LAYERS (0-8,12), self-lowbit: the model
                           drafts for itself, cheaper (combine with +)
  --draft-max K (4)  --draft-min K (1)  --draft-p-min P (0)  --draft-adaptive on|off (on)
)"},
      {"chat", ember::cli::cmd_chat, R"(ember chat -m MODEL [-n N] [--system TEXT] [-t THREADS] [-c CTX] [sampling options]
  Interactive multi-turn chat in the model's chat format (terminal or pipe).
)"},
      {"perplexity", ember::cli::cmd_perplexity, R"(ember perplexity -m MODEL -f FILE [-c CTX] [-t THREADS] [--chunks N] [--nll FILE] [KV options]
          [--stream [--tokens N] [--batch 16] [--segment 1000] [--restart N] [--csv FILE]]
  Perplexity of a text, scored like llama-perplexity (windows of CTX tokens, second
  half scored). --nll FILE writes each scored token's negative log-likelihood, one a
  line (compare two KV types token by token: bench/kv_quality.py). --stream reads the
  text as one stream through a bounded cache and reports perplexity per segment.
)"},
      {"bench", ember::cli::cmd_bench, R"(ember bench -m MODEL [-p 512] [-n 64] [-d 0] [-t THREADS] [-r 3] [--kv-type T] [--json]
          [--draft KIND | -md DRAFT [--draft-max K]]
  Prefill and decode speed, reported like llama-bench: -p -n -d -t take comma lists
  (-p 128,512 -t 1,2), 0 skips a test (-n 0: prefill only), -d DEPTH: tokens already in
  the cache when the measurement starts; --kv-type, --kv-group as below. With a draft (see ember run --help):
  plain and speculative greedy decode of -n tokens on four kinds of prompt.
)"},
      {"batched-bench", cmd_batched_bench, R"(ember batched-bench -m MODEL [-npp 128] [-ntg 128] [-npl 1,2,4,8,16] [-t THREADS] [-r 1]
          [--json] [--llama-order]
  Aggregate speed of N concurrent requests through the Engine (as llama-batched-bench).
)"},
      {"logits", ember::cli::cmd_logits, R"(ember logits -m MODEL --tokens "1 5 9" -o FILE [-t THREADS]
  Writes float32 [n_tokens][vocab] logits, row-major little-endian.
)"},
      {"tokenize", ember::cli::cmd_tokenize, R"(ember tokenize -m MODEL -p TEXT [--bos] [--special]
  Prints token ids (no BOS unless --bos; special tokens only with --special).
)"},
      {"quantize", ember::cli::cmd_quantize, R"(ember quantize IN OUT --type TYPE [-t THREADS] [--pure] [--method gptq|awq] [--calib FILE [--samples N]] [--act-order]
                 [--budget SIZE | --bpw B] [--sensitivity proxy|kl] [--eval FILE] [--max-ppl-rise R | --no-gate]
  Writes OUT, a GGUF quantized from IN (F32/F16/BF16; a quantized IN is dequantized first,
  with a warning), with llama-quantize's types. IN may
  also be a Hugging Face checkpoint folder: it is converted first, as `ember convert` does.
  TYPE: Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 (one type; the output / tied embedding in Q6_K or Q8_0),
        Q4_K Q5_K Q6_K (the same with super-block types), Q4_K_M Q5_K_M (llama.cpp's mixtures),
        Q4_G128 Q4_G64 (ember's asymmetric INT4 groups of 128 / 64; only ember loads them),
        Q8_W (ember's W8A8: INT8 per weight row and per token; only ember loads it),
        Q8_WR (Q8_W on Hadamard-rotated weights and activations: W8A8 nearer the source),
        F16 (no quantization: every weight, of any type ember reads, dequantized to F16)
  -t, --threads N        threads (default 1)
  --pure                 every quantizable tensor in TYPE (rows it cannot hold still fall back)
  --method rtn|gptq|awq  rtn: round to nearest (default, llama-quantize's bytes); gptq: GPTQ
                         with calibration Hessians onto each projection's type (every GGUF
                         block type, ember's groups and Q8_W), on -t threads;
                         awq: AWQ's per-channel scales, folded into the norms (any TYPE);
                         smoothquant: SmoothQuant's fixed-alpha scales folded the same way, which
                         move activation outliers into the weights (for TYPE Q8_W/Q8_WR)
  --smooth-alpha A|auto  SmoothQuant's migration strength in [0, 1] (default 0.5); auto: per group,
                         alpha and the statistic (max |x| or rms) of the smallest W8A8 output error
  --gptq                 smoothquant: round the smoothed weights by GPTQ (with the smoothed
                         inputs' Hessians; --damp, --act-order apply) instead of to nearest
  --calib FILE           the calibration text (gptq, awq, --budget/--bpw, --sensitivity kl); without
                         --eval its last 10 % (at least one --eval-ctx chunk) is held out for the gate
  --samples N            calibration windows (default 512; fewer when the text is short)
  --sample-tokens T      tokens per calibration window, BOS first (default 512)
  --damp D               gptq: damping, lambda = D * mean(diag H) (default 0.01)
  --act-order            gptq: columns in order of decreasing Hessian diagonal
  --no-awq-clip          awq: no clipping search (by default each block of Q4_0/Q4_1/Q5_0/Q5_1/
                         Q8_0/Q4_G* is clamped to the ratio of its range, 1 down to 0.5, that
                         gives the smallest output error on the calibration inputs)
  --budget SIZE, --bpw B mixed precision: the layers' projections take types from Q4_K..Q8_0
                         (K types) or Q4_0/Q5_0/Q8_0 so that the tensor data fits SIZE (200M,
                         1.2G) or B bits per weight, the most sensitive kept widest
  --sensitivity proxy|kl proxy (default): relative layer-wise output error, no model run; kl:
                         the KL divergence with each tensor alone quantized, measured on two
                         256-token windows of --calib (one forward pass per tensor); ranks the
                         mixture and the gate
  --eval FILE            perplexity of FILE with IN and with OUT, in the report
  --eval-ctx N           tokens per evaluation chunk (default 512); --eval-chunks N: at most N chunks
  --max-ppl-rise R       the gate, on whenever there is a text to evaluate (--eval, or --calib's
                         held-out tail): when OUT's perplexity exceeds IN's by more than R (a
                         fraction, 0.05, or a percentage, 5%; default 5%), the most sensitive
                         tensors are raised a type (Q4/Q5 -> Q8_0 -> F16, Q4_K/Q5_K -> Q6_K,
                         Q8_W(R) -> Q8_0) a few per round until it holds; if it cannot, OUT is not written and the
                         exit status is 1. R = 0 or --no-gate: no gate
  --gate-step N          tensors raised per round (default: a 16th of the quantized tensors)
  --gate-rounds N        at most N rounds (default: until every tensor is at its widest)
  llama-quantize's order IN OUT TYPE [THREADS] is accepted. A progress line per tensor goes
  to stderr, the report (type, size, relative error per tensor; totals) to stdout.
)"},
      {"convert", ember::cli::cmd_convert, R"(ember convert DIR OUT [--type auto|f32|f16|bf16]
  Writes OUT, a GGUF, from the Hugging Face checkpoint folder DIR (config.json, *.safetensors,
  tokenizer.model and the tokenizer's JSON files), read by ember itself: the tensor names,
  values and metadata llama.cpp's convert_hf_to_gguf.py writes. Llama/Mistral, Granite,
  Gemma 2/3, Qwen 2/3/3-MoE, OLMo 2 and Phi-3; SentencePiece or byte-level BPE (docs/convert.md).
  --type T               the matrices' type; auto (default): the source's when all matrices share
                         F32, F16 or BF16, else F32. Norms and 1-D tensors are always F32.
)"},
      {"info", ember::cli::cmd_info, R"(ember info -m MODEL [-t THREADS]
  Architecture, hyper-parameters, tensor types, memory use, the KV pool's reservation
  and the threads the model would use.
)"},
  };
  return list;
}

// The usage of one command, with the option groups it takes.
std::string usage_of(const Command& c) {
  std::string u = std::string("usage: ") + c.usage;
  const std::string name = c.name;
  if (name == "run" || name == "chat") u += kSamplingUsage;
  if (name == "run" || name == "perplexity" || name == "bench") u += kKVUsage;
  u += "\n--device cpu|cuda|cuda:N (any command): where the model's weights and compute go (default\n"
       "  cpu; cuda is device 0, cuda:N device N; needs a build with the CUDA backend and a GPU, docs/cuda.md).\n";
  u += "llama.cpp's -ngl N is accepted and ignored (use --device cuda to run on a GPU).\n";
  return u;
}

std::string overall_usage() {
  std::string u = "usage: ember <command> [options]   (ember <command> --help for its options)\n\ncommands:\n";
  for (const Command& c : commands()) {
    // The description: the first line indented by exactly two spaces.
    std::string description;
    size_t at = 0;
    for (std::string_view text = c.usage; at < text.size();) {
      const size_t end = std::min(text.find('\n', at), text.size());
      const std::string_view line = text.substr(at, end - at);
      if (line.size() > 2 && line.starts_with("  ") && line[2] != ' ') {
        description = line.substr(2);
        break;
      }
      at = end + 1;
    }
    u += fmt::format("  {:<14}{}\n", c.name, description);
  }
  u += "  version       print the version\n\nWrong arguments exit with code 2, errors with code 1.\n";
  return u;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ember::cli;
  if (argc < 2) {
    std::fputs(overall_usage().c_str(), stderr);
    return 2;
  }
  const std::string name = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (name == "version" || name == "--version") {
    std::printf("ember %s (API %d)\n", ember::version_string(), ember::api_version());
    return 0;
  }
  if (name == "help" || name == "--help" || name == "-h") {
    std::fputs(overall_usage().c_str(), stdout);
    return 0;
  }
  const Command* command = nullptr;
  for (const Command& c : commands())
    if (name == c.name) command = &c;
  if (!command) {
    std::fprintf(stderr, "ember: unknown command '%s'\n\n%s", name.c_str(), overall_usage().c_str());
    return 2;
  }
  try {
    return command->run(args);
  } catch (const HelpRequested&) {
    std::fputs(usage_of(*command).c_str(), stdout);
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ember %s: %s\n\n%s", command->name, e.what(), usage_of(*command).c_str());
    return 2;
  } catch (const ember::Error& e) {
    std::fprintf(stderr, "ember: error (%s): %s\n", ember::to_string(e.code()), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: error: %s\n", e.what());
    return 1;
  }
}
