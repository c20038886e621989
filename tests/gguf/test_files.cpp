// Real files: every GGUF in ../shared/golden and ../shared/tokenizer, and the
// Gemma 3 270M model when present. The facts checked here were read independently
// with gguf-py's GGUFReader (llama.cpp/gguf-py).
#include <algorithm>
#include <chrono>
#include <filesystem>

#include "common/paths.hpp"
#include "gguf_test_util.hpp"

using namespace ember;
using namespace ember::gguf;

namespace {

std::vector<std::filesystem::path> gguf_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".gguf") out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Opens `name` in `dir`, or returns nullopt after a warning when it is absent.
std::optional<File> open_if_present(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) {
    WARN("skipped: " << path.string() << " is not present");
    return std::nullopt;
  }
  return File::open(path);
}

}  // namespace

TEST_CASE("gguf files: every golden and tokenizer file parses", "[gguf][files]") {
  for (const std::filesystem::path& dir : {test::golden_dir(), test::tokenizer_dir()}) {
    if (!std::filesystem::is_directory(dir)) {
      WARN("skipped: " << dir.string() << " is missing");
      continue;
    }
    const std::vector<std::filesystem::path> files = gguf_files(dir);
    CHECK(!files.empty());
    for (const std::filesystem::path& path : files) {
      INFO("file " << path.string());
      const File file = File::open(path);
      CHECK(file.version() == 3);
      CHECK(file.alignment() == 32);
      CHECK(!file.get_string("general.architecture").empty());
      CHECK(!file.get_array("tokenizer.ggml.tokens").items.empty());
      uint64_t tensor_bytes = 0;
      for (const TensorInfo& t : file.tensors()) {
        CHECK(t.data >= file.bytes().data() + file.data_offset());
        CHECK(t.data + t.n_bytes <= file.bytes().data() + file.file_size());
        tensor_bytes += t.n_bytes;
      }
      if (!file.tensors().empty()) {
        CHECK(file.data_offset() <= file.file_size());
        CHECK(file.data_offset() + tensor_bytes <= file.file_size());
      }
    }
  }
}

TEST_CASE("gguf files: llama-Q8_0 facts", "[gguf][files]") {
  const auto file = open_if_present(test::golden_dir() / "llama-Q8_0.gguf");
  if (!file) return;
  CHECK(file->file_size() == 3505568);
  CHECK(file->metadata().size() == 18);
  CHECK(file->tensors().size() == 39);
  CHECK(file->data_offset() == 14752);
  CHECK(file->get_string("general.architecture") == "llama");
  CHECK(file->get_uint("llama.block_count") == 4);
  CHECK(file->get_uint("llama.embedding_length") == 256);
  CHECK(file->get_uint("llama.context_length") == 2048);
  CHECK(file->get_uint("llama.attention.head_count_kv") == 2);
  CHECK(file->get("llama.attention.layer_norm_rms_epsilon").type() == ValueType::f32);
  CHECK(file->get_float("llama.attention.layer_norm_rms_epsilon") == double(1e-6f));
  CHECK(file->get_float("llama.rope.freq_base") == 10000.0);
  CHECK(file->get_uint("tokenizer.ggml.bos_token_id") == 1);
  CHECK(file->get_string("tokenizer.ggml.model") == "llama");
  CHECK(file->get_uint("general.file_type") == 7);

  const Array& tokens = file->get_array("tokenizer.ggml.tokens");
  REQUIRE(tokens.items.size() == 512);
  CHECK(tokens.items.front().as_string() == "<unk>");
  CHECK(tokens.items.back().as_string() == "\xe2\x96\x81w511");
  const Array& scores = file->get_array("tokenizer.ggml.scores");
  CHECK(scores.element_type == ValueType::f32);
  CHECK(scores.items.back().as_float() == -511.0);
  const Array& types = file->get_array("tokenizer.ggml.token_type");
  CHECK(types.element_type == ValueType::i32);
  CHECK(types.items[0].as_int() == 2);

  CHECK(file->tensors().front().name == "output.weight");
  const TensorInfo& embd = file->tensor("token_embd.weight");
  CHECK(embd.shape == std::vector<int64_t>{256, 512});
  CHECK(embd.type == quant::DType::q8_0);
  CHECK(embd.n_elements == 256 * 512);
  CHECK(embd.rows() == 512);
  CHECK(embd.n_bytes == 139264);
  CHECK(file->data_offset() + embd.offset == 155040);
  const uint8_t first[16] = {119, 37, 16, 38, 15, 195, 42, 21, 231, 27, 17, 14, 1, 26, 222, 248};
  for (int k = 0; k < 16; ++k) CHECK(std::to_integer<uint8_t>(embd.data[k]) == first[k]);
  uint64_t sum = 0;
  for (uint64_t k = 0; k < embd.n_bytes; ++k) sum += std::to_integer<uint8_t>(embd.data[k]);
  CHECK(sum == 17319852);

  const TensorInfo& last = file->tensors().back();
  CHECK(last.name == "blk.3.ffn_up.weight");
  CHECK(file->data_offset() + last.offset + last.n_bytes == file->file_size());
}

TEST_CASE("gguf files: mixed-type and 16-bit golden files", "[gguf][files]") {
  if (const auto file = open_if_present(test::golden_dir() / "gemma3-Q4_K_M.gguf")) {
    CHECK(file->get_string("general.architecture") == "gemma3");
    CHECK(file->tensors().size() == 80);
    CHECK(file->get_uint("gemma3.block_count") == 6);
    const TensorInfo& k = file->tensor("blk.0.attn_k.weight");
    CHECK(k.shape == std::vector<int64_t>{320, 128});
    CHECK(k.type == quant::DType::q5_0);
    CHECK(k.n_bytes == 28160);
    const TensorInfo& down = file->tensor("blk.0.ffn_down.weight");
    CHECK(down.shape == std::vector<int64_t>{1024, 320});
    CHECK(down.type == quant::DType::q4_k);
    CHECK(down.n_bytes == 184320);
    CHECK(file->tensor("output_norm.weight").shape == std::vector<int64_t>{320});
  }
  if (const auto file = open_if_present(test::golden_dir() / "llama-BF16.gguf")) {
    CHECK(file->tensor("output.weight").type == quant::DType::bf16);
    CHECK(file->tensor("output.weight").n_bytes == 262144);
    CHECK(file->get_uint("general.file_type") == 32);
  }
}

TEST_CASE("gguf files: vocabulary-only tokenizer files", "[gguf][files]") {
  if (const auto file = open_if_present(test::tokenizer_dir() / "ggml-vocab-gpt-2.gguf")) {
    CHECK(file->tensors().empty());
    CHECK(file->metadata().size() == 16);
    CHECK(file->get_string("tokenizer.ggml.model") == "gpt2");
    const Array& tokens = file->get_array("tokenizer.ggml.tokens");
    REQUIRE(tokens.items.size() == 50257);
    CHECK(tokens.items[0].as_string() == "!");
    CHECK(tokens.items[50256].as_string() == "<|endoftext|>");
    const Array& merges = file->get_array("tokenizer.ggml.merges");
    REQUIRE(merges.items.size() == 50000);
    CHECK(merges.items[0].as_string() == "\xc4\xa0 t");
    // No tensors: the data section would start past the end of the file, which is fine.
    CHECK(file->data_offset() == 1766816);
    CHECK(file->file_size() == 1766807);
  }
  if (const auto file = open_if_present(test::tokenizer_dir() / "ggml-vocab-llama-spm.gguf")) {
    CHECK(file->get_array("tokenizer.ggml.tokens").items.size() == 32000);
    CHECK(file->get_uint("llama.block_count") == 32);
  }
}

TEST_CASE("gguf files: the real Gemma 3 270M model opens quickly", "[gguf][files][model]") {
  const std::filesystem::path path = test::real_model_path();
  if (!std::filesystem::exists(path)) {
    WARN("skipped: " << path.string() << " is not present (scripts/fetch-model.sh)");
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  const File file = File::open(path);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  WARN("opened " << path.filename().string() << " (" << file.file_size() / 1048576 << " MiB, "
                 << file.metadata().size() << " keys, " << file.tensors().size() << " tensors) in "
                 << seconds * 1000 << " ms");
#if !defined(__SANITIZE_ADDRESS__)
  CHECK(seconds < 1.0);
#endif
  CHECK(file.get_string("general.architecture") == "gemma3");
  CHECK(file.metadata().size() == 33);
  CHECK(file.tensors().size() == 236);
  CHECK(file.get_uint("gemma3.block_count") == 18);
  CHECK(file.get_uint("gemma3.context_length") == 32768);
  const Array& tokens = file.get_array("tokenizer.ggml.tokens");
  REQUIRE(tokens.items.size() == 262144);
  CHECK(tokens.items[0].as_string() == "<pad>");
  CHECK(tokens.items[2].as_string() == "<bos>");
  CHECK(tokens.items[106].as_string() == "<end_of_turn>");
  const TensorInfo& embd = file.tensor("token_embd.weight");
  CHECK(embd.shape == std::vector<int64_t>{640, 262144});
  CHECK(embd.type == quant::DType::q8_0);
  CHECK(file.data_offset() == 6525120);
  CHECK(file.data_offset() + embd.offset == 6527680);
  CHECK(embd.n_bytes == 178257920);
}
