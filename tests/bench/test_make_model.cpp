// bench/model_writer: the random llama models used to compare ember with llama.cpp
// carry llama.cpp's metadata and per-tensor types, and run in ember with finite logits.
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <unistd.h>

#include "bench/model_writer.hpp"
#include "common/catch.hpp"
#include "ember/ember.hpp"
#include "gguf/gguf.hpp"

using namespace ember;
using bench::FileType;
using quant::DType;

namespace {

std::filesystem::path temp_model(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("ember-test-make-model-" + std::to_string(getpid()) + "-" + name);
}

// Writes the tiny preset in `type`, returns the path (removed by the caller).
std::filesystem::path write_tiny(FileType type) {
  bench::ModelSpec spec;
  spec.shape = *bench::llama_preset("tiny");
  spec.type = type;
  const auto path = temp_model(std::string(bench::file_type_name(type)) + ".gguf");
  bench::write_llama_model(spec, path);
  return path;
}

}  // namespace

TEST_CASE("Q4_K_M per-tensor types follow llama-quantize", "[bench]") {
  // TinyLlama's 22 layers: use_more_bits holds for 0, 1, 4, 7, 10, 13, 16, 19, 20, 21.
  std::vector<int> q6;
  for (int il = 0; il < 22; ++il) {
    const DType v = bench::weight_type_of(FileType::q4_k_m, "attn_v.weight", il, 22);
    CHECK(v == bench::weight_type_of(FileType::q4_k_m, "ffn_down.weight", il, 22));
    if (v == DType::q6_k) q6.push_back(il);
    else CHECK(v == DType::q4_k);
    CHECK(bench::weight_type_of(FileType::q4_k_m, "attn_q.weight", il, 22) == DType::q4_k);
    CHECK(bench::weight_type_of(FileType::q4_k_m, "ffn_norm.weight", il, 22) == DType::f32);
  }
  CHECK(q6 == std::vector<int>{0, 1, 4, 7, 10, 13, 16, 19, 20, 21});
  CHECK(bench::weight_type_of(FileType::q4_k_m, "output.weight", 0, 22) == DType::q6_k);
  CHECK(bench::weight_type_of(FileType::q4_k_m, "token_embd.weight", 0, 22) == DType::q4_k);
  CHECK(bench::weight_type_of(FileType::q4_0, "output.weight", 0, 22) == DType::q6_k);
  CHECK(bench::weight_type_of(FileType::q4_0, "token_embd.weight", 0, 22) == DType::q4_0);
  CHECK(bench::weight_type_of(FileType::q8_0, "output.weight", 0, 22) == DType::q8_0);
  CHECK(bench::weight_type_of(FileType::f16, "output.weight", 0, 22) == DType::f16);
  CHECK(bench::file_type_from_name("q4_k_m") == FileType::q4_k_m);
  CHECK(bench::file_type_from_name("Q8_0") == FileType::q8_0);
  CHECK_FALSE(bench::file_type_from_name("q3_k").has_value());
  CHECK(bench::llama_ftype(FileType::q4_k_m) == 15);
}

TEST_CASE("written files carry the metadata llama.cpp requires", "[bench]") {
  const auto path = write_tiny(FileType::q4_k_m);
  {
    const gguf::File f = gguf::File::open(path);
    CHECK(f.get_string("general.architecture") == "llama");
    CHECK(f.get_uint("general.file_type") == 15);
    CHECK(f.get_uint("general.alignment") == 32);
    CHECK(f.get_uint("llama.block_count") == 2);
    CHECK(f.get_uint("llama.embedding_length") == 256);
    CHECK(f.get_uint("llama.feed_forward_length") == 512);
    CHECK(f.get_uint("llama.attention.head_count") == 4);
    CHECK(f.get_uint("llama.attention.head_count_kv") == 2);
    CHECK(f.get_uint("llama.rope.dimension_count") == 64);
    CHECK(f.get_float("llama.rope.freq_base") == 10000.0);
    CHECK(std::abs(f.get_float("llama.attention.layer_norm_rms_epsilon") - 1e-5) < 1e-9);
    CHECK(f.get_uint("llama.context_length") == 512);
    CHECK(f.get_string("tokenizer.ggml.model") == "llama");
    CHECK(f.get_array("tokenizer.ggml.tokens").items.size() == 512);
    CHECK(f.get_array("tokenizer.ggml.scores").items.size() == 512);
    CHECK(f.get_array("tokenizer.ggml.token_type").items.size() == 512);
    CHECK(f.get_array("tokenizer.ggml.tokens").items[3 + 0x0A].as_string() == "<0x0A>");
    CHECK(f.get_uint("tokenizer.ggml.bos_token_id") == 1);
    CHECK(f.get_uint("tokenizer.ggml.eos_token_id") == 2);
    // 1 embedding + 2 x 9 block tensors + output norm + output.
    CHECK(f.tensors().size() == 21);
    CHECK(f.tensor("token_embd.weight").shape == std::vector<int64_t>{256, 512});
    CHECK(f.tensor("blk.0.attn_k.weight").shape == std::vector<int64_t>{256, 128});
    CHECK(f.tensor("blk.1.ffn_down.weight").shape == std::vector<int64_t>{512, 256});
    CHECK(f.tensor("output.weight").type == DType::q6_k);
    CHECK(f.tensor("blk.0.attn_v.weight").type == DType::q4_k);   // use_more_bits(0, 2) is false
    CHECK(f.tensor("blk.1.attn_v.weight").type == DType::q6_k);   // the last eighth
    CHECK(f.tensor("blk.0.attn_norm.weight").type == DType::f32);
  }
  std::filesystem::remove(path);
}

TEST_CASE("written models run in ember with finite, varied logits", "[bench]") {
  for (const FileType type : {FileType::q4_0, FileType::q8_0, FileType::q4_k_m, FileType::f16}) {
    DYNAMIC_SECTION(bench::file_type_name(type)) {
      const auto path = write_tiny(type);
      {
        ModelOptions options;
        options.threads = 2;
        auto model = Model::load(path, options);
        CHECK(model->info().architecture == "llama");
        CHECK(model->info().n_layer == 2);
        CHECK(model->info().n_vocab == 512);
        CHECK(model->info().tokenizer == "spm");
        auto session = model->new_session();
        std::mt19937 rng(9);
        std::vector<int32_t> prompt(24);
        for (auto& t : prompt) t = int32_t(rng() % 512);
        session->prefill(prompt);
        for (int step = 0; step < 4; ++step) {
          const auto logits = session->logits();
          REQUIRE(logits.size() == 512);
          float lo = logits[0], hi = logits[0];
          for (const float v : logits) {
            REQUIRE(std::isfinite(v));
            lo = std::min(lo, v);
            hi = std::max(hi, v);
          }
          CHECK(hi - lo > 1e-3f);
          session->decode(int32_t(rng() % 512));
        }
      }
      std::filesystem::remove(path);
    }
  }
}

// Runs `write` and checks that it throws invalid_argument with `needle` in the message.
static void require_invalid(const bench::ModelSpec& spec, const std::string& needle) {
  const auto path = temp_model("bad.gguf");
  try {
    bench::write_llama_model(spec, path);
  } catch (const Error& e) {
    INFO("message: " << e.what());
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(path));
    return;
  }
  std::filesystem::remove(path);
  FAIL("no ember::Error was thrown");
}

TEST_CASE("bad shapes are rejected", "[bench]") {
  bench::ModelSpec spec;
  spec.shape = *bench::llama_preset("tiny");
  spec.shape.n_head_kv = 3;
  require_invalid(spec, "cannot be grouped over 3 kv heads");
  spec.shape = *bench::llama_preset("tiny");
  spec.type = FileType::q4_k_m;
  spec.shape.n_ff = 320;   // not a multiple of 256
  require_invalid(spec, "multiples of 256");
  spec.shape = *bench::llama_preset("tiny");
  spec.shape.n_vocab = 100;
  require_invalid(spec, "below 259");
}
