// Model::load_from_memory and Model::load_from_reader on a GGUF embedded in the test
// binary: the same model as load(path) (llama.cpp's logits, bit for bit for this
// Q8_0 file), the same validation, and the documented ownership rules.
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/catch.hpp"
#include "common/expect_error.hpp"
#include "common/paths.hpp"
#include "ember/ember.hpp"
#include "model/golden.hpp"
#include "tests/loading/embedded_model.hpp"

using namespace ember;

namespace {

const test::GoldenCase& golden() {
  static const test::GoldenCase g = test::read_golden(test::golden_dir(), "llama-Q8_0");
  return g;
}

// The logits of every prompt token of the golden case, [prompt][vocab].
std::vector<float> prompt_logits(const Model& model) {
  auto session = model.new_session({.kv = {.max_tokens = 128}});
  return session->evaluate(golden().prompt);
}

std::vector<float> golden_prompt_rows() {
  const auto& g = golden();
  return {g.logits.begin(), g.logits.begin() + long(g.prompt.size() * size_t(g.vocab))};
}

}  // namespace

TEST_CASE("a model read in place from memory gives llama.cpp's logits", "[loading]") {
  const auto image = test::embedded_model();
  REQUIRE(image.size() > 1000);
  auto model = Model::load_from_memory(image, {.threads = 1});
  CHECK(model->info().architecture == "llama");
  CHECK(model->info().file_bytes == image.size());
  // Q8_0 matrices run in llama.cpp's order: the logits are its own, bit for bit.
  CHECK(prompt_logits(*model) == golden_prompt_rows());
  // The same as the file on disk.
  auto from_file = Model::load(test::golden_dir() / "llama-Q8_0.gguf", {.threads = 1});
  CHECK(prompt_logits(*from_file) == prompt_logits(*model));
}

TEST_CASE("a copied image may be freed as soon as load_from_memory returns", "[loading]") {
  const auto image = test::embedded_model();
  std::vector<std::byte> buffer(image.begin(), image.end());
  auto model = Model::load_from_memory(buffer, {.threads = 1}, /*copy=*/true);
  std::fill(buffer.begin(), buffer.end(), std::byte{0xAB});  // the host reuses its buffer
  buffer.clear();
  buffer.shrink_to_fit();
  CHECK(prompt_logits(*model) == golden_prompt_rows());
}

TEST_CASE("an unaligned image is copied with a warning", "[loading]") {
  const auto image = test::embedded_model();
  std::vector<std::byte> buffer(image.size() + 1);
  std::memcpy(buffer.data() + 1, image.data(), image.size());
  std::vector<std::string> warnings;
  ModelOptions options{.threads = 1};
  options.log = [&](LogLevel level, std::string_view m) {
    if (level == LogLevel::warning) warnings.emplace_back(m);
  };
  auto model = Model::load_from_memory(std::span(buffer).subspan(1), options);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Matchers::Contains("not 8-byte aligned"));
  std::fill(buffer.begin(), buffer.end(), std::byte{0});
  CHECK(prompt_logits(*model) == golden_prompt_rows());
}

TEST_CASE("a host reader supplies the image in ascending pieces", "[loading]") {
  const auto image = test::embedded_model();
  std::vector<uint64_t> offsets;
  const Model::ReadAt read = [&](uint64_t offset, void* dst, size_t n) {
    offsets.push_back(offset);
    if (offset + n > image.size()) return false;
    std::memcpy(dst, image.data() + offset, n);
    return true;
  };
  std::vector<float> progress;
  ModelOptions options{.threads = 1};
  options.progress = [&](float f) {
    progress.push_back(f);
    return true;
  };
  auto model = Model::load_from_reader(image.size(), read, options);
  REQUIRE(!offsets.empty());
  CHECK(std::is_sorted(offsets.begin(), offsets.end()));
  CHECK(std::is_sorted(progress.begin(), progress.end()));
  CHECK(progress.back() == 1.0f);
  CHECK(prompt_logits(*model) == golden_prompt_rows());
}

TEST_CASE("images from memory and readers are validated like files", "[loading][errors]") {
  const auto image = test::embedded_model();
  // Truncated: the tensor data runs past the end.
  test::expect_error([&] { Model::load_from_memory(image.first(image.size() / 2)); }, ErrorCode::malformed_file,
                     "<memory>");
  test::expect_error([&] { Model::load_from_memory(image.first(0)); }, ErrorCode::malformed_file, "<memory>");
  // A corrupted magic.
  std::vector<std::byte> bad(image.begin(), image.end());
  bad[0] = std::byte{'X'};
  test::expect_error([&] { Model::load_from_memory(bad); }, ErrorCode::malformed_file, "magic");
  // A reader that fails, one that is empty, one for a truncated size.
  const Model::ReadAt failing = [](uint64_t, void*, size_t) { return false; };
  test::expect_error([&] { Model::load_from_reader(image.size(), failing); }, ErrorCode::io, "reader failed");
  test::expect_error([&] { Model::load_from_reader(image.size(), Model::ReadAt{}); }, ErrorCode::invalid_argument,
                     "reader is empty");
  const Model::ReadAt copying = [&](uint64_t offset, void* dst, size_t n) {
    std::memcpy(dst, image.data() + offset, n);
    return true;
  };
  test::expect_error([&] { Model::load_from_reader(1000, copying); }, ErrorCode::malformed_file, "<reader>");
  // Options are checked before anything is read.
  test::expect_error([&] { Model::load_from_memory(image, {.threads = -1}); }, ErrorCode::invalid_argument,
                     "threads");
  // Device indices: negative for any device, and any but 0 for the CPU.
  test::expect_error([&] { Model::load_from_memory(image, {.device_index = -1}); }, ErrorCode::invalid_argument,
                     "device_index");
  test::expect_error([&] { Model::load_from_memory(image, {.device_index = 1}); }, ErrorCode::invalid_argument,
                     "one device (index 0), not 1");
  // A cancelling progress callback.
  ModelOptions cancel;
  cancel.progress = [](float f) { return f < 0.5f; };
  test::expect_error([&] { Model::load_from_reader(image.size(), copying, cancel); }, ErrorCode::invalid_argument,
                     "cancelled");
}
