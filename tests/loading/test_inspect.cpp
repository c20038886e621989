// Model::inspect: what ember makes of a file without running it, and every reason it
// cannot run one (ember info prints this for files that fail to load).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "common/expect_error.hpp"
#include "common/paths.hpp"
#include "ember/ember.hpp"
#include "gguf/gguf.hpp"
#include "quant/dtype.hpp"

using namespace ember;

namespace {

// A file in the temporary directory, removed when this goes out of scope.
struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("ember-inspect-" + std::to_string(::getpid()) + "-" + name)) {}
  ~TempFile() { std::filesystem::remove(path); }
};

bool has_line(const std::vector<std::string>& lines, const std::string& a, const std::string& b = "") {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) {
    return l.find(a) != std::string::npos && l.find(b) != std::string::npos;
  });
}

}  // namespace

TEST_CASE("inspect: a file ember runs has nothing missing", "[loading][inspect]") {
  const ModelSupport s = Model::inspect(test::golden_dir() / "llama-Q8_0.gguf");
  CHECK(s.architecture == "llama");
  CHECK(s.runnable());
  CHECK(s.missing.empty());
}

TEST_CASE("inspect: every reason a file cannot run, not only the first", "[loading][inspect][errors]") {
  gguf::Writer w;
  w.add_string("general.architecture", "mamba");
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "no-such-pre-tokenizer");
  w.add_string_array("tokenizer.ggml.tokens", {"a", "b", "ab"});
  w.add_string_array("tokenizer.ggml.merges", {"a b"});
  const auto zeros = [](quant::DType type, int64_t cols, int64_t rows) {
    return std::vector<std::byte>(quant::row_bytes(type, cols) * size_t(rows));
  };
  const auto iq4 = zeros(quant::DType::iq4_xs, 256, 2), q2 = zeros(quant::DType::q2_k, 256, 3);
  w.add_tensor("blk.0.ffn_down.weight", quant::DType::iq4_xs, {256, 2}, iq4);
  w.add_tensor("blk.1.ffn_down.weight", quant::DType::iq4_xs, {256, 2}, iq4);
  w.add_tensor("token_embd.weight", quant::DType::q2_k, {256, 3}, q2);
  const TempFile file("mamba.gguf");
  w.write(file.path);

  const ModelSupport s = Model::inspect(file.path);
  CHECK(s.architecture == "mamba");
  CHECK(s.tokenizer == "gpt2");
  CHECK(s.pre_tokenizer == "no-such-pre-tokenizer");
  CHECK_FALSE(s.runnable());
  INFO([&] {
    std::string all;
    for (const auto& l : s.missing) all += l + "\n";
    return all;
  }());
  CHECK(has_line(s.missing, "tensor type IQ4_XS: 2 tensor(s)", "'blk.0.ffn_down.weight'"));
  CHECK(has_line(s.missing, "tensor type Q2_K: 1 tensor(s)", "'token_embd.weight'"));
  CHECK(has_line(s.missing, "tokenizer:", "no-such-pre-tokenizer"));
  CHECK(has_line(s.missing, "model:", "architecture 'mamba' is not supported"));
  CHECK(s.missing.size() == 4);
  // load() stops at the first of them.
  test::expect_error([&] { (void)Model::load(file.path); }, ErrorCode::unsupported, "");
}

TEST_CASE("inspect: a file that is not GGUF is an error, not a report", "[loading][inspect][errors]") {
  const TempFile file("not.gguf");
  std::ofstream(file.path) << "not a gguf file at all";
  test::expect_error([&] { (void)Model::inspect(file.path); }, ErrorCode::malformed_file, "");
  test::expect_error([&] { (void)Model::inspect(file.path.string() + ".absent"); }, ErrorCode::io, "");
}
