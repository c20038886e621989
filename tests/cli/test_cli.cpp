// The ember command-line tool, run as a separate process: exit codes, output
// formats, and its results against the fixtures (golden logits, tokenizer vectors).
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "common/paths.hpp"
#include "model/golden.hpp"

namespace {

struct Run {
  int code = -1;
  std::string out;  // stdout and stderr together
};

// Runs `ember ARGS` through the shell, with `input` on stdin.
Run run_cli(const std::string& args, const std::string& input = "") {
  const std::string in_file = "/tmp/ember_cli_test_input.txt";
  std::ofstream(in_file) << input;
  const std::string cmd = std::string(EMBER_CLI_PATH) + " " + args + " < " + in_file + " 2>&1";
  Run r;
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Appended piece by piece: "'" + p.string() + "'" trips GCC 12's -Wrestrict false positive.
std::string quote(const std::filesystem::path& p) {
  std::string quoted(1, '\'');
  quoted += p.string();
  quoted += '\'';
  return quoted;
}

}  // namespace

TEST_CASE("wrong arguments print the usage and exit with code 2", "[cli]") {
  for (const char* args : {"", "frobnicate", "logits", "logits -m", "tokenize -p hi", "run -m x.gguf --temp",
                           "bench -m x.gguf -n -3", "bench -m x.gguf -d 8,,16", "bench -m x.gguf -p 4,x", "info -m x.gguf --bogus", "run -m x.gguf -p hi --kv-type int3",
                           "run -m x.gguf -p hi --evict lru", "perplexity -m x.gguf -f y --kv-group 48",
                           "perplexity -m x.gguf -f y --kv-type int4 --kv-exact 5000",
                           "run -m x.gguf -p hi --evict streaming --sinks 8 --window 8", "info -m x.gguf --device tpu", "info -m x.gguf --device cuda:x", "info -m x.gguf --device cuda:",
                           "bench -m x.gguf --device", "bench -m x.gguf -p 0 -n 0", "bench -m x.gguf -n 0 --draft lookup"}) {
    INFO("ember " << args);
    const Run r = run_cli(args);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Matchers::Contains("usage: ember"));
  }
}

TEST_CASE("errors print the ember::Error message and exit with code 1", "[cli]") {
  const Run missing = run_cli("info -m /nonexistent/model.gguf");
  CHECK(missing.code == 1);
  CHECK_THAT(missing.out, Catch::Matchers::Contains("error (io)"));
  CHECK_THAT(missing.out, Catch::Matchers::Contains("/nonexistent/model.gguf"));

  const std::string garbage = "/tmp/ember_cli_garbage.gguf";
  std::ofstream(garbage) << "GGUF this is not a model";
  const Run bad = run_cli("info -m " + garbage);
  CHECK(bad.code == 1);
  CHECK_THAT(bad.out, Catch::Matchers::Contains("error (malformed_file)"));

  // A text file without end (/dev/zero) is refused once past the limit, before any model loads.
  for (const char* args : {"run -m x.gguf -f /dev/zero", "perplexity -m x.gguf -f /dev/zero"}) {
    INFO("ember " << args);
    const Run endless = run_cli(args);
    CHECK(endless.code == 1);
    CHECK_THAT(endless.out, Catch::Matchers::Contains("error (invalid_argument)"));
    CHECK_THAT(endless.out, Catch::Matchers::Contains("larger than 256 MiB"));
  }
  const Run no_text = run_cli("perplexity -m x.gguf -f /nonexistent/text.txt");
  CHECK(no_text.code == 1);
  CHECK_THAT(no_text.out, Catch::Matchers::Contains("error (io)"));

  // --device cuda: runs on a GPU where there is one, else says why not.
  const auto gguf = ember::test::golden_dir() / "llama-Q8_0.gguf";
  if (std::filesystem::exists(gguf)) {
    const Run gpu = run_cli("info --device cuda -m " + quote(gguf));
    if (gpu.code != 0) {
      CHECK(gpu.code == 1);
      CHECK_THAT(gpu.out, Catch::Matchers::Contains("CUDA"));  // "no CUDA device", "no CUDA backend"
    }
  }

  const auto vocab = ember::test::tokenizer_dir() / "ggml-vocab-gpt-2.gguf";
  if (std::filesystem::exists(vocab)) {
    const Run no_weights = run_cli("info -m " + quote(vocab));
    CHECK(no_weights.code == 1);
  }
}

TEST_CASE("ember logits writes llama.cpp's golden layout", "[cli]") {
  const std::string name = "llama-Q8_0";
  if (!std::filesystem::exists(ember::test::golden_dir() / (name + ".gguf"))) return;
  const auto g = ember::test::read_golden(ember::test::golden_dir(), name);
  std::string ids;
  for (int32_t t : g.prompt) ids += std::to_string(t) + " ";
  for (int32_t t : g.greedy) ids += std::to_string(t) + " ";
  const std::string out = "/tmp/ember_cli_logits.f32";
  const Run r = run_cli("logits -m " + quote(ember::test::golden_dir() / (name + ".gguf")) + " --tokens '" + ids +
                      "' -o " + out + " -t 2");
  REQUIRE(r.code == 0);
  std::ifstream in(out, std::ios::binary | std::ios::ate);
  REQUIRE(size_t(in.tellg()) == g.logits.size() * sizeof(float));
  in.seekg(0);
  std::vector<float> ours(g.logits.size());
  in.read(reinterpret_cast<char*>(ours.data()), std::streamsize(ours.size() * sizeof(float)));
  const auto a = ember::test::compare_logits(ours, g.logits, g.vocab);
  std::printf("ember logits %s: maxrel %.3e, argmax agreement %.1f %%\n", name.c_str(), a.maxrel,
              100 * a.argmax_agree);
  CHECK(a.maxrel <= 5e-2);
  CHECK(a.argmax_agree >= 0.90);
}

TEST_CASE("ember info and ember tokenize", "[cli]") {
  const auto model = ember::test::golden_dir() / "gemma3-Q4_K_M.gguf";
  if (std::filesystem::exists(model)) {
    const Run r = run_cli("info -m " + quote(model));
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Matchers::Contains("architecture:     gemma3"));
    CHECK_THAT(r.out, Catch::Matchers::Contains("sliding window:   16 tokens on 5 of 6 layers"));
    CHECK_THAT(r.out, Catch::Matchers::Contains("Q4_K x"));
    CHECK_THAT(r.out, Catch::Matchers::Contains("weights:"));
    // Bytes per cached token for each storage type.
    for (const char* kind : {"f32", "f16", "int8 g32", "int8 g64", "int4 g32", "int4 g64"})
      CHECK_THAT(r.out, Catch::Matchers::Contains(std::string("  ") + kind + " "));
    // The CPU kernel level: the one EMBER_CPU_ISA forces (scalar runs everywhere).
    const char* saved = std::getenv("EMBER_CPU_ISA");
    const std::string saved_value = saved ? saved : "";
    setenv("EMBER_CPU_ISA", "scalar", 1);
    const Run forced = run_cli("info -m " + quote(model));
    if (saved) setenv("EMBER_CPU_ISA", saved_value.c_str(), 1); else unsetenv("EMBER_CPU_ISA");
    CHECK_THAT(forced.out, Catch::Matchers::Contains("cpu kernels:      scalar ("));
  }
  const auto vocab = ember::test::tokenizer_dir() / "ggml-vocab-llama-spm.gguf";
  if (std::filesystem::exists(vocab)) {
    // The first vector of the shared SentencePiece file: its ids without BOS.
    std::ifstream inp(ember::test::tokenizer_dir() / "ggml-vocab-llama-spm.gguf.inp");
    std::ifstream outp(ember::test::tokenizer_dir() / "ggml-vocab-llama-spm.gguf.out");
    std::string all((std::istreambuf_iterator<char>(inp)), {}), expected;
    std::getline(outp, expected);
    expected.erase(0, expected.find_first_not_of(' '));
    const std::string first = all.substr(0, all.find("\n__ggml_vocab_test__\n"));
    if (first.find('\'') == std::string::npos && !first.empty()) {
      const Run r = run_cli("tokenize -m " + quote(vocab) + " -p '" + first + "'");
      REQUIRE(r.code == 0);
      CHECK(r.out == expected + "\n");
      const Run with_bos = run_cli("tokenize -m " + quote(vocab) + " -p '" + first + "' --bos");
      CHECK(with_bos.out == "1 " + expected + "\n");
    }
    const Run special = run_cli("tokenize -m " + quote(vocab) + " -p '<s>' --special");
    CHECK(special.out == "1\n");
    const Run plain = run_cli("tokenize -m " + quote(vocab) + " -p '<s>'");
    CHECK(plain.out != "1\n");
  }
}

TEST_CASE("run, chat, perplexity and bench on the real model", "[cli][real_model]") {
  const auto model = ember::test::real_model_path();
  if (!std::filesystem::exists(model)) {
    WARN("SKIPPED: the real model is not at " << model << "; run scripts/fetch-model.sh");
    return;
  }
  const Run run = run_cli("run -m " + quote(model) + " -p 'The capital of France is' -n 8 --temp 0 -t 2");
  CHECK(run.code == 0);
  CHECK(run.out.rfind("The capital of France is", 0) == 0);

  // Two turns from a pipe: two replies, one per line, then /exit. (The model is the
  // base Gemma 3 270M, so the replies are not good answers; the format is what is checked.)
  const Run chat = run_cli("chat -m " + quote(model) + " -n 12 --temp 0 -t 2", "Hello!\nName a colour.\n/exit\n");
  CHECK(chat.code == 0);
  CHECK(std::count(chat.out.begin(), chat.out.end(), '\n') >= 2);
  CHECK(chat.out.find("\r") == std::string::npos);  // no progress bar when piped

  const Run ppl = run_cli("perplexity -m " + quote(model) + " -f " + quote(ember::test::data_dir() / "gemma3" / "perplexity.txt") +
                        " --ctx 256 --chunks 2 -t 2");
  CHECK(ppl.code == 0);
  CHECK_THAT(ppl.out, Catch::Matchers::Contains("perplexity: "));
  CHECK_THAT(ppl.out, Catch::Matchers::Contains("2 chunks of 256 tokens, 254 tokens scored"));

  // The KV flags: a bounded stream and quantized storage.
  const Run kv_run = run_cli("run -m " + quote(model) +
                             " -p 'The capital of France is' -n 40 --temp 0 -t 2 --kv-type int8 --evict streaming"
                             " --sinks 4 --window 16");
  CHECK(kv_run.code == 0);
  const Run stream = run_cli("perplexity -m " + quote(model) + " -f " +
                             quote(ember::test::data_dir() / "gemma3" / "perplexity.txt") +
                             " --stream --tokens 300 --segment 100 --evict h2o --heavy 32 --recent 32 --kv-type int4 -t 2");
  CHECK(stream.code == 0);
  CHECK_THAT(stream.out, Catch::Matchers::Contains("h2o: 32 heavy + 32 recent"));
  CHECK_THAT(stream.out, Catch::Matchers::Contains("over 299 tokens (stream)"));

  const Run bench = run_cli("bench -m " + quote(model) + " -p 32 -n 4 -r 1 -t 2 --json");
  CHECK(bench.code == 0);
  for (const char* key : {"\"prefill_tokens_per_s\"", "\"decode_tokens_per_s\"", "\"threads\": 2", "\"model\""})
    CHECK_THAT(bench.out, Catch::Matchers::Contains(key));
  // -d: the measured tokens start after 40 tokens in the cache; one line per test.
  const Run deep = run_cli("bench -m " + quote(model) + " -p 16 -n 2,3 -d 0,40 -r 1 -t 2 --json");
  CHECK(deep.code == 0);
  for (const char* key : {"\"n_depth\": 40, \"n_prompt\": 16, \"n_gen\": 0", "\"n_depth\": 40, \"n_prompt\": 0, \"n_gen\": 3",
                          "\"n_depth\": 0, \"n_prompt\": 0, \"n_gen\": 2", "\"test\": \"tg3\""})
    CHECK_THAT(deep.out, Catch::Matchers::Contains(key));
  CHECK(std::count(deep.out.begin(), deep.out.end(), '\n') == 6);
}

TEST_CASE("every command prints its own usage for --help and for a wrong argument", "[cli]") {
  for (const char* command : {"run", "chat", "perplexity", "bench", "batched-bench", "logits", "tokenize", "info", "quantize", "convert"}) {
    INFO("ember " << command);
    for (const char* flag : {"--help", "-h"}) {
      const Run help = run_cli(std::string(command) + " " + flag);
      CHECK(help.code == 0);
      CHECK_THAT(help.out, Catch::Matchers::StartsWith(std::string("usage: ember ") + command + " "));
    }
    const Run wrong = run_cli(std::string(command) + " --no-such-flag");
    CHECK(wrong.code == 2);
    CHECK_THAT(wrong.out, Catch::Matchers::Contains(std::string("usage: ember ") + command + " "));
    CHECK_THAT(wrong.out, !Catch::Matchers::Contains("commands:"));  // not the whole list
  }
  const Run all = run_cli("--help");
  CHECK(all.code == 0);
  CHECK_THAT(all.out, Catch::Matchers::Contains("commands:"));
}

namespace {
// The generated text of `ember run`: its output without the statistics line that
// stderr adds at the end (it may land before stdout's last newline).
std::string text_of(const Run& r) {
  std::string text = r.out;
  const size_t at = text.rfind(" prompt tokens at ");
  if (at != std::string::npos) text.erase(text.rfind('[', at));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}
}  // namespace

TEST_CASE("llama.cpp's spellings are accepted where they mean the same", "[cli][real_model]") {
  const auto model = ember::test::real_model_path();
  if (!std::filesystem::exists(model)) {
    WARN("SKIPPED: the real model is not at " << model << "; run scripts/fetch-model.sh");
    return;
  }
  const std::string run = "run -m " + quote(model) + " -n 6 -t 2 ";
  const std::string prompt = "-p 'The capital of France is' ";
  const Run base = run_cli(run + prompt + "--temp 0 --ctx 64");
  REQUIRE(base.code == 0);

  // -c / --ctx-size = --ctx: the same text, and the same failure when too small.
  CHECK(text_of(run_cli(run + prompt + "--temp 0 -c 64")) == text_of(base));
  CHECK(text_of(run_cli(run + prompt + "--temp 0 --ctx-size 64")) == text_of(base));
  CHECK_THAT(run_cli(run + prompt + "--temp 0 --ctx 3").out, Catch::Matchers::Contains("stop: context_full"));
  CHECK_THAT(run_cli(run + prompt + "--temp 0 --ctx-size 3").out, Catch::Matchers::Contains("stop: context_full"));
  CHECK_THAT(run_cli(run + prompt + "--temp 0 -c 3").out, Catch::Matchers::Contains("stop: context_full"));

  // -f / --file: the prompt from a file.
  const std::string file = "/tmp/ember_cli_prompt.txt";
  std::ofstream(file) << "The capital of France is";
  CHECK(text_of(run_cli(run + "-f " + file + " --temp 0 --ctx 64")) == text_of(base));
  CHECK(text_of(run_cli(run + "--file " + file + " --temp 0 --ctx 64")) == text_of(base));
  CHECK(run_cli(run + "-f /nonexistent/prompt.txt --temp 0").code == 1);
  CHECK(run_cli(run + prompt + "-f " + file).code == 2);  // one or the other

  // -ctk / -ctv = --kv-type (q8_0 = int8 g32, q4_1 = int4 g32); they must agree, except
  // q8_0 keys with q4_1 values (= k8v4).
  const std::string int8 = text_of(run_cli(run + prompt + "--temp 0 --kv-type int8"));
  CHECK(text_of(run_cli(run + prompt + "--temp 0 -ctk q8_0 -ctv q8_0")) == int8);
  CHECK(text_of(run_cli(run + prompt + "--temp 0 --cache-type-k q8_0")) == int8);
  CHECK(text_of(run_cli(run + prompt + "--temp 0 -ctk q4_1 -ctv q4_1")) ==
        text_of(run_cli(run + prompt + "--temp 0 --kv-type int4")));
  CHECK(text_of(run_cli(run + prompt + "--temp 0 -ctk q8_0 -ctv q4_1")) ==
        text_of(run_cli(run + prompt + "--temp 0 --kv-type k8v4")));
  const Run disagree = run_cli(run + prompt + "--temp 0 -ctk q8_0 -ctv f16");
  CHECK(disagree.code == 2);
  CHECK_THAT(disagree.out, Catch::Matchers::Contains("one type"));
  CHECK(run_cli(run + prompt + "-ctk q4_0").code == 2);

  // -s = --seed; --frequency-penalty = --freq-penalty; --presence-penalty.
  const std::string sampled = text_of(run_cli(run + prompt + "--temp 1 --seed 5"));
  CHECK(text_of(run_cli(run + prompt + "--temp 1 -s 5")) == sampled);
  CHECK(text_of(run_cli(run + prompt + "--temp 0 --frequency-penalty 3")) ==
        text_of(run_cli(run + prompt + "--temp 0 --freq-penalty 3")));
  CHECK(run_cli(run + prompt + "--temp 0 --presence-penalty 1.5").code == 0);

  // -e: escapes in the prompt; --no-display-prompt: no echo.
  const Run escaped = run_cli(run + "-p 'Line one\\nLine two' -e --temp 0");
  CHECK(escaped.code == 0);
  CHECK(escaped.out.rfind("Line one\nLine two", 0) == 0);
  const Run quiet = run_cli(run + prompt + "--temp 0 --ctx 64 --no-display-prompt");
  CHECK(quiet.code == 0);
  CHECK(quiet.out.rfind("The capital of France is", 0) != 0);
  CHECK(text_of(base).ends_with(text_of(quiet)));

  // bench: comma lists for -p and -t (as llama-bench), one JSON line per test.
  const Run lists = run_cli("bench -m " + quote(model) + " -p 8,16 -n 2 -t 1,2 -r 1 --json");
  CHECK(lists.code == 0);
  for (const char* key : {"\"threads\": 1, \"n_depth\": 0, \"n_prompt\": 8", "\"threads\": 1, \"n_depth\": 0, \"n_prompt\": 16",
                          "\"threads\": 2, \"n_depth\": 0, \"n_prompt\": 8", "\"threads\": 2, \"n_depth\": 0, \"n_prompt\": 0, \"n_gen\": 2"})
    CHECK_THAT(lists.out, Catch::Matchers::Contains(key));
  CHECK(std::count(lists.out.begin(), lists.out.end(), '\n') == 6);
  // -n 0 (and -p 0) skip that test, as in llama-bench: one prefill line, no decode line.
  const Run prefill_only = run_cli("bench -m " + quote(model) + " -p 8 -n 0 -r 1 -t 1 --json");
  CHECK(prefill_only.code == 0);
  CHECK_THAT(prefill_only.out, Catch::Matchers::Contains("\"test\": \"pp8\""));
  CHECK_THAT(prefill_only.out, !Catch::Matchers::Contains("\"test\": \"tg"));
  CHECK(std::count(prefill_only.out.begin(), prefill_only.out.end(), '\n') == 1);
  // bench with a draft: plain against speculative on four prompts, the same tokens.
  const Run spec = run_cli("bench -m " + quote(model) + " -n 8 -r 1 -t 2 --draft lookup --json");
  CHECK(spec.code == 0);
  CHECK(std::count(spec.out.begin(), spec.out.end(), '\n') == 4);
  CHECK_THAT(spec.out, Catch::Matchers::Contains("\"same_tokens\": true"));
  CHECK_THAT(spec.out, !Catch::Matchers::Contains("\"same_tokens\": false"));
  // run with drafts: the statistics line reports them; bad draft flags are usage errors.
  const Run drafted = run_cli(run + prompt + "--temp 0 --draft lookup --draft-max 6");
  CHECK(drafted.code == 0);
  CHECK_THAT(drafted.out, Catch::Matchers::Contains("drafts: "));
  CHECK(run_cli(run + prompt + "--draft-max 4").code == 2);
  CHECK(run_cli(run + prompt + "--draft lookup --draft-max 17").code == 2);
  CHECK(run_cli(run + prompt + "--draft self-bogus").code == 2);
  CHECK(run_cli(run + prompt + "-md /nonexistent/draft.gguf").code == 1);

  // -ngl: accepted and ignored on the CPU, with a note.
  const Run ngl = run_cli(run + prompt + "--temp 0 --ctx 64 -ngl 99");
  CHECK(ngl.code == 0);
  CHECK_THAT(ngl.out, Catch::Matchers::Contains("-ngl 99 is ignored"));
  CHECK(run_cli(run + prompt + "-ngl lots").code == 2);
}

TEST_CASE("ember convert: argument errors exit with 2, failures with 1, success writes the file", "[cli]") {
  const std::string dir = quote(ember::test::data_dir() / "hf" / "qwen2");
  const std::string out = "/tmp/ember_cli_convert_out.gguf";
  std::filesystem::remove(out);
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"convert", "DIR and OUT are required"},
           {"convert " + dir, "DIR and OUT are required"},
           {"convert " + dir + " " + out + " --type q8_0", "unknown --type 'q8_0'"},
           {"convert " + dir + " " + out + " extra", "DIR and OUT are required"}}) {
    INFO("ember " << args);
    const Run r = run_cli(args);
    CHECK(r.code == 2);
    CHECK(r.out.find(message) != std::string::npos);
  }
  const Run missing = run_cli("convert /nonexistent-dir " + out);
  CHECK(missing.code == 1);
  CHECK(missing.out.find("is not a directory") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(out));
  const Run ok = run_cli("convert " + dir + " " + out + " --type f16");
  CHECK(ok.code == 0);
  CHECK(ok.out.find("(Qwen2ForCausalLM)") != std::string::npos);
  CHECK(ok.out.find("matrices F16, 606 tokens") != std::string::npos);
  CHECK(std::filesystem::exists(out));
  std::filesystem::remove(out);
  // quantize takes the folder and says so.
  const Run q = run_cli("quantize " + dir + " " + out + " --type Q8_0");
  CHECK(q.code == 0);
  CHECK(q.out.find("input: the Hugging Face checkpoint") != std::string::npos);
  CHECK(std::filesystem::exists(out));
  std::filesystem::remove(out);
}

TEST_CASE("ember quantize: argument errors exit with 2, failures with 1, success writes the file", "[cli]") {
  const std::string in = quote(ember::test::golden_dir() / "llama-F16.gguf");
  const std::string out = "/tmp/ember_cli_quantize_out.gguf";
  std::filesystem::remove(out);
  const std::pair<std::string, std::string> usage_errors[] = {
      {"quantize", "IN and OUT are required"},
      {"quantize " + in, "IN and OUT are required"},
      {"quantize " + in + " " + out, "--type is required"},
      {"quantize " + in + " " + out + " --type Q3_K", "unknown type 'Q3_K'"},
      {"quantize " + in + " " + out + " Q4_0 --type Q4_0", "given twice"},
      {"quantize " + in + " " + out + " --type Q4_0 -t 0", "--threads"},
      {"quantize " + in + " " + out + " Q4_0 0", "THREADS must be 1..1024"},
      {"quantize " + in + " " + out + " Q4_0 2 extra", "unexpected argument 'extra'"},
      {"quantize " + in + " " + out + " --type Q4_0 --method gptq", "--method gptq needs --calib FILE"},
      {"quantize " + in + " " + out + " --type Q4_0 --method awq", "--method awq needs --calib FILE"},
      {"quantize " + in + " " + out + " --type Q4_0 --method awq --calib x.txt --damp 0.1", "--damp is used by --method gptq only"},
      {"quantize " + in + " " + out + " --type Q4_0 --method spqr --calib x.txt", "unknown method 'spqr'"},
      {"quantize " + in + " " + out + " --type Q4_0 --max-ppl-rise 5%", "need --eval FILE or --calib FILE"},
      {"quantize " + in + " " + out + " --type Q4_0 --eval-ctx 64", "need --eval FILE or --calib FILE"},
      {"quantize " + in + " " + out + " --type Q4_0 --eval x.txt --max-ppl-rise lots", "--max-ppl-rise must be"},
      {"quantize " + in + " " + out + " --type Q4_0 --eval x.txt --max-ppl-rise -1%", "--max-ppl-rise must be"},
      {"quantize " + in + " " + out + " --type Q4_0 --eval x.txt --no-gate --max-ppl-rise 5%", "--no-gate excludes"},
      {"quantize " + in + " " + out + " --type Q4_0 --calib x.txt --no-gate --gate-step 2", "--no-gate excludes"},
      {"quantize " + in + " " + out + " --type Q4_0 --eval x.txt --gate-step 0", "--gate-step"},
      {"quantize " + in + " " + out + " --type Q4_0 --eval x.txt --gate-rounds 0", "--gate-rounds"},
      {"quantize " + in + " " + out + " --type Q4_0 --sensitivity kl", "--sensitivity kl needs --calib FILE"},
      {"quantize " + in + " " + out + " --type Q4_0 --calib x.txt --sensitivity fisher", "unknown sensitivity 'fisher'"},
      {"quantize " + in + " " + out + " --type Q4_0 --calib x.txt --no-gate", "with --no-gate nothing here reads it"},
      {"quantize " + in + " " + out + " --type Q4_0 --eval x.txt --eval-ctx 4", "--eval-ctx"},
      {"quantize " + in + " " + out + " --type Q4_0 --method gptq --calib x.txt --samples 0", "--samples"},
      {"quantize " + in + " " + out + " --type Q4_0 --method gptq --calib x.txt --damp -1", "--damp must be > 0"},
      {"quantize " + in + " " + out + " --type Q4_K --act-order", "--act-order is used by --method gptq only"},
      {"quantize " + in + " " + out + " --type Q4_0 --method gptq --calib x.txt --no-awq-clip", "--no-awq-clip is used by --method awq only"},
      {"quantize " + in + " " + out + " --type Q4_0 --no-awq-clip", "--no-awq-clip is used by --method awq only"},
      {"quantize " + in + " " + out + " --type Q4_K --method awq --calib x.txt --act-order", "--act-order is used by --method gptq only"},
      {"quantize " + in + " " + out + " --type Q8_W --method smoothquant --calib x.txt --smooth-alpha 1.5", "--smooth-alpha must be in [0, 1]"},
      {"quantize " + in + " " + out + " --type Q8_W --method awq --calib x.txt --smooth-alpha 0.5", "--smooth-alpha is used by --method smoothquant only"},
      {"quantize " + in + " " + out + " --type Q8_W --smooth-alpha 0.5", "--smooth-alpha is used by --method smoothquant only"},
      {"quantize " + in + " " + out + " --type Q8_W --method gptq --calib x.txt --gptq", "--gptq is used by --method smoothquant only"},
      {"quantize " + in + " " + out + " --type Q8_W --gptq", "--gptq is used by --method smoothquant only"},
      {"quantize " + in + " " + out + " --type Q8_W --method smoothquant --calib x.txt --damp 0.1", "--damp is used by --method gptq only"},
      {"quantize " + in + " " + out + " --type Q4_G32", "unknown type 'Q4_G32'"},
  };
  for (const auto& [args, message] : usage_errors) {
    INFO("ember " << args);
    const Run r = run_cli(args);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Matchers::Contains(message));
    CHECK_THAT(r.out, Catch::Matchers::Contains("usage: ember quantize"));
  }
  CHECK_FALSE(std::filesystem::exists(out));

  const Run missing = run_cli("quantize /nonexistent/in.gguf " + out + " --type Q4_0");
  CHECK(missing.code == 1);
  CHECK_THAT(missing.out, Catch::Matchers::Contains("error (io)"));
  CHECK_THAT(missing.out, Catch::Matchers::Contains("/nonexistent/in.gguf"));
  const Run unwritable = run_cli("quantize " + in + " /nonexistent/dir/out.gguf --type Q4_0");
  CHECK(unwritable.code == 1);
  CHECK_THAT(unwritable.out, Catch::Matchers::Contains("error (io)"));
  CHECK_THAT(unwritable.out, Catch::Matchers::Contains("cannot create a file in '/nonexistent/dir'"));
  // GPTQ writes every recipe (Q8_W too); a calibration text too short is the error here.
  const Run short_text = run_cli("quantize " + in + " " + out + " --type Q8_W --method smoothquant --gptq --calib /etc/hostname");
  CHECK(short_text.code == 1);
  CHECK_THAT(short_text.out, Catch::Matchers::Contains("error (invalid_argument)"));
  CHECK_THAT(short_text.out, Catch::Matchers::Contains("too few to hold out"));
  const Run no_text = run_cli("quantize " + in + " " + out + " --type Q4_0 --method gptq --calib /nonexistent/calib.txt");
  CHECK(no_text.code == 1);
  CHECK_THAT(no_text.out, Catch::Matchers::Contains("error (io)"));
  CHECK_THAT(no_text.out, Catch::Matchers::Contains("/nonexistent/calib.txt"));
  CHECK_FALSE(std::filesystem::exists(out));

  // llama-quantize's positional order; a progress line per tensor and the report.
  const Run ok = run_cli("quantize " + in + " " + out + " q4_k_m 2");
  CHECK(ok.code == 0);
  CHECK_THAT(ok.out, Catch::Matchers::Contains("[  39/  39]"));
  CHECK_THAT(ok.out, Catch::Matchers::Contains("blk.3.ffn_down.weight"));
  CHECK_THAT(ok.out, Catch::Matchers::Contains("F16 -> Q6_K"));
  CHECK_THAT(ok.out, Catch::Matchers::Contains("total: 39 tensors"));
  CHECK_THAT(ok.out, Catch::Matchers::Contains("general.file_type 15"));
  CHECK(std::filesystem::file_size(out) == 2010784);   // llama-quantize's Q4_K_M of the same file
  std::filesystem::remove(out);
}

TEST_CASE("ember quantize: the gate on a held-out calibration tail raises tensors, or fails with exit 1", "[cli]") {
  const std::string in = quote(ember::test::golden_dir() / "llama-F16.gguf");
  const std::string out = "/tmp/ember_cli_gate_out.gguf", calib = "/tmp/ember_cli_gate_calib.txt";
  {
    std::ofstream text(calib);
    for (int i = 0; i < 60; ++i)
      text << "Section " << i << ". The harbour master logged " << i * 11 % 17 << " ships before noon, and the "
           << "weather station reported a light westerly wind with scattered showers over the northern hills.\n";
  }
  std::filesystem::remove(out);
  // A Q4_0 rise of this random model is far above 1 %: rounds until it holds.
  const Run gated = run_cli("quantize " + in + " " + out + " --type Q4_0 --calib " + calib +
                            " --eval-ctx 64 --max-ppl-rise 1% --sensitivity kl -t 2");
  INFO(gated.out);
  CHECK(gated.code == 0);
  CHECK_THAT(gated.out, Catch::Matchers::Contains("sensitivity (KL divergence"));
  CHECK_THAT(gated.out, Catch::Matchers::Contains("perplexity of the held-out last"));
  CHECK_THAT(gated.out, Catch::Matchers::Contains("ember quantize: gate round 1: raised"));
  CHECK_THAT(gated.out, Catch::Matchers::Contains("Q4_0 -> Q8_0 (ranked by KL"));
  CHECK(std::filesystem::exists(out));
  std::filesystem::remove(out);
  // One round of one tensor cannot meet 0.0001 %: nothing written, exit 1.
  const Run failed = run_cli("quantize " + in + " " + out + " --type Q4_0 --calib " + calib +
                             " --eval-ctx 64 --max-ppl-rise 0.0001% --gate-step 1 --gate-rounds 1 -t 2");
  INFO(failed.out);
  CHECK(failed.code == 1);
  CHECK_THAT(failed.out, Catch::Matchers::Contains("after 1 rounds (--gate-rounds)"));
  CHECK_THAT(failed.out, Catch::Matchers::Contains("was not written"));
  CHECK_FALSE(std::filesystem::exists(out));
  // --no-gate: written without any evaluation (the calibration text serves the mixture).
  const Run off = run_cli("quantize " + in + " " + out + " --type Q4_0 --calib " + calib + " --samples 8 --bpw 6 --no-gate -t 2");
  CHECK(off.code == 0);
  CHECK_THAT(off.out, !Catch::Matchers::Contains("perplexity of"));
  CHECK(std::filesystem::exists(out));
  std::filesystem::remove(out);
  std::filesystem::remove(calib);
}
