// Tokenizer speed per pre-tokenizer: encodes about 1 MiB of mixed text
// (tests/data/tokenizer/bpe_rules.inp repeated: prose, code, numbers, CJK,
// emoji, whitespace runs) with the shared GPT-2 vocabulary switched to each
// tokenizer.ggml.pre name, and prints MB/s (best of 5 runs) by the CPU time
// of the encoding thread, which other processes on a busy machine disturb
// far less than the wall-clock time.
//
//   bench_pre_tokenizer [name ...]      (default: gpt-2 llama-bpe qwen2)
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "common/paths.hpp"
#include "tok_test_util.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  const auto gpt2_path = ember::test::tokenizer_dir() / "ggml-vocab-gpt-2.gguf";
  if (!std::filesystem::exists(gpt2_path)) {
    std::printf("%s not found: skipped\n", gpt2_path.string().c_str());
    return 4;
  }
  const auto gpt2 = ember::gguf::File::open(gpt2_path);
  const std::string sample = ember::test::read_bytes(ember::test::data_dir() / "tokenizer" / "bpe_rules.inp");
  std::string text;
  while (text.size() < (1u << 20)) text += sample;

  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) names.emplace_back(argv[i]);
  if (names.empty()) names = {"gpt-2", "llama-bpe", "qwen2"};

  for (const std::string& name : names) {
    const auto file = ember::test::with_pre_tokenizer(gpt2, name);
    const auto tok = ember::tok::Tokenizer::from_gguf(file);
    double best = 1e30;
    size_t n_ids = 0;
    for (int run = 0; run < 5; ++run) {
      const double t0 = thread_seconds();
      const auto ids = tok.encode(text, false, false);
      best = std::min(best, thread_seconds() - t0);
      n_ids = ids.size();
    }
    std::printf("%-16s %8zu bytes -> %7zu ids  %7.2f ms  %6.2f MB/s\n", name.c_str(), text.size(), n_ids, best * 1e3,
                text.size() / best / 1e6);
  }
  return 0;
}
