// Shared pieces of the ember CLI: argument parsing, model loading with a
// progress bar, log printing.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ember/ember.hpp"

namespace ember::cli {

// Thrown for a wrong command line: main prints the usage and exits with code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Thrown when the arguments hold -h or --help: main prints the command's usage on
// stdout and exits with code 0.
struct HelpRequested {};

// Parsed "--flag value" / "-f value" / "--switch" arguments of one command.
//
// Besides each command's own aliases, llama.cpp's spellings are accepted wherever
// the command has the flag they mean (kLlamaAliases: -c/--ctx-size, -s, -ctk/-ctv,
// --frequency-penalty, ...), and -ngl N / --n-gpu-layers N is accepted by every
// command and ignored with a note (ember's CLI runs on the CPU).
class Args {
 public:
  // `flags_with_values` and `switches` list the accepted names (with dashes);
  // aliases map short names to long ones ("-m" -> "--model").
  Args(const std::vector<std::string>& argv, const std::vector<std::string>& flags_with_values,
       const std::vector<std::string>& switches, const std::map<std::string, std::string>& aliases);

  bool has(const std::string& name) const;
  std::string get(const std::string& name) const;  // throws UsageError when missing
  std::string get_or(const std::string& name, const std::string& fallback) const;
  int64_t get_int(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const;
  double get_double(const std::string& name, double fallback, double lo, double hi) const;

 private:
  std::map<std::string, std::string> values_;
};

bool stderr_is_terminal();
bool stdin_is_terminal();

// Loads a model, drawing a progress bar on stderr when it is a terminal.
// Log messages at warning and above go to stderr; with `verbose`, all of them.
std::shared_ptr<Model> load_model(const std::string& path, int threads, bool verbose, bool vocab_only = false);

// A one-line progress bar on stderr (only when stderr is a terminal).
class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  ~ProgressBar();
  void update(double fraction);
  void done();

 private:
  std::string label_;
  bool enabled_;
  int last_percent_ = -1;
};

// llama.cpp's spellings of flags ember names otherwise (applied by every Args).
inline const std::map<std::string, std::string> kLlamaAliases = {
    {"-c", "--ctx"},
    {"--ctx-size", "--ctx"},
    {"-s", "--seed"},
    {"--frequency-penalty", "--freq-penalty"},
    {"-ctk", "--cache-type-k"},
    {"-ctv", "--cache-type-v"},
    {"-f", "--file"},
    {"-e", "--escape"},
    {"--threads-batch", "--threads"},
};

// KV-cache flags shared by run and perplexity:
//   --kv-type f16|f32|int8|int4|int4o  --kv-group 32|64  --evict none|streaming|h2o
//   --sinks N --window N (streaming)  --heavy N --recent N (h2o)
//   -ctk/-ctv (--cache-type-k/v) f16|f32|q8_0|q4_1, llama.cpp's names: keys and
//   values share one type in ember, so both must agree (q8_0 = int8 g32, q4_1 = int4 g32)
inline const std::vector<std::string> kKVFlags = {"--kv-type", "--kv-group",     "--evict",        "--sinks",
                                                  "--window",  "--heavy",        "--recent",       "--cache-type-k",
                                                  "--cache-type-v", "--kv-exact"};
// Reads them into `kv` (leaving max_tokens alone). Throws UsageError for bad values.
void apply_kv_args(const Args& args, KVCacheOptions& kv);
// "int8 (group 32), streaming: 4 sinks + 1020 window" and the like.
std::string describe_kv(const KVCacheOptions& kv);

// The whole of a text file (a prompt, a perplexity text) read in pieces: ember::Error
// (io) if it cannot be opened or read, (invalid_argument) past max_bytes, so that
// /dev/zero or a FIFO that never ends is refused instead of filling the memory.
constexpr size_t kMaxTextFileBytes = size_t(256) << 20;
std::string read_text_file(const std::string& path, const char* what, size_t max_bytes = kMaxTextFileBytes);

// Replaces the escapes llama.cpp's -e understands (\n \t \r \\ \" \' \xHH) in `text`.
std::string process_escapes(const std::string& text);

int cmd_logits(const std::vector<std::string>& args);
int cmd_tokenize(const std::vector<std::string>& args);
int cmd_info(const std::vector<std::string>& args);
int cmd_run(const std::vector<std::string>& args);
int cmd_chat(const std::vector<std::string>& args);
int cmd_perplexity(const std::vector<std::string>& args);
int cmd_bench(const std::vector<std::string>& args);
int cmd_batched_bench(const std::vector<std::string>& args);
int cmd_quantize(const std::vector<std::string>& args);
int cmd_convert(const std::vector<std::string>& args);
// ember bench --draft ...: plain and speculative greedy decode of four kinds of prompt.
int bench_speculative(const Model& model, const SpeculativeOptions& spec, int32_t n_gen, int repetitions, bool json);

}  // namespace ember::cli
