// bench/model_writer: the random llama models used to compare ember with llama.cpp
// carry llama.cpp's metadata and per-tensor types, and run in ember with finite logits.
#include <algorithm>
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

// The tiny preset as a qwen3moe model: 8 experts of width 128, 2 per token, heads of 96.
bench::LlamaShape tiny_moe() {
  bench::LlamaShape s = *bench::llama_preset("tiny");
  s.head_dim = 96;
  s.n_expert = 8;
  s.n_expert_used = 2;
  s.n_ff_exp = 128;
  return s;
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
  spec.shape = tiny_moe();
  spec.shape.n_expert_used = 9;
  require_invalid(spec, "8 experts need 1..8 used per token");
  spec.shape = tiny_moe();
  spec.shape.head_dim = 33;
  require_invalid(spec, "head_dim 33 must be positive and even");
  spec.shape = tiny_moe();
  spec.type = FileType::q4_k_m;
  spec.shape.n_ff_exp = 64;
  require_invalid(spec, "n_ff_exp 64 must be multiples of 256");
}

TEST_CASE("the qwen3-30b-a3b preset has Qwen3-30B-A3B's layer shapes", "[bench]") {
  const auto s = bench::llama_preset("qwen3-30b-a3b");
  REQUIRE(s.has_value());
  CHECK(s->n_embd == 2048);
  CHECK(s->n_head == 32);
  CHECK(s->n_head_kv == 4);
  CHECK(s->head_dim == 128);
  CHECK(s->n_expert == 128);
  CHECK(s->n_expert_used == 8);
  CHECK(s->n_ff_exp == 768);
  CHECK(bench::weight_type_of(FileType::q4_0, "ffn_gate_inp.weight", 0, 4) == DType::f32);
  CHECK(bench::weight_type_of(FileType::q4_k_m, "ffn_down_exps.weight", 3, 4) == DType::q6_k);
  CHECK(bench::weight_type_of(FileType::q4_k_m, "ffn_down_exps.weight", 1, 4) == DType::q4_k);
  CHECK(bench::weight_type_of(FileType::q4_k_m, "ffn_up_exps.weight", 3, 4) == DType::q4_k);
}

TEST_CASE("written qwen3moe models load and run in ember", "[bench]") {
  bench::ModelSpec spec;
  spec.shape = tiny_moe();
  spec.type = FileType::q8_0;
  const auto path = temp_model("moe-Q8_0.gguf");
  bench::write_llama_model(spec, path);
  {
    const gguf::File f = gguf::File::open(path);
    CHECK(f.get_string("general.architecture") == "qwen3moe");
    CHECK(f.get_uint("qwen3moe.expert_count") == 8);
    CHECK(f.get_uint("qwen3moe.expert_used_count") == 2);
    CHECK(f.get_uint("qwen3moe.expert_feed_forward_length") == 128);
    CHECK(f.get_uint("qwen3moe.attention.key_length") == 96);
    CHECK(f.tensor("blk.0.attn_q.weight").shape == std::vector<int64_t>{256, 4 * 96});
    CHECK(f.tensor("blk.0.attn_output.weight").shape == std::vector<int64_t>{4 * 96, 256});
    CHECK(f.tensor("blk.0.attn_q_norm.weight").shape == std::vector<int64_t>{96});
    CHECK(f.tensor("blk.1.ffn_gate_inp.weight").type == DType::f32);
    CHECK(f.tensor("blk.1.ffn_down_exps.weight").shape == std::vector<int64_t>{128, 256, 8});
    CHECK(f.tensor("blk.1.ffn_down_exps.weight").type == DType::q8_0);
  }
  {
    ModelOptions options;
    options.threads = 2;
    auto model = Model::load(path, options);
    const ModelInfo& info = model->info();
    CHECK(info.architecture == "qwen3moe");
    // A decode step reads 2 of the 8 experts: the expert matrices (3 per layer, 8 x 128 x 256
    // Q8_0 values = 34 bytes per 32) count a quarter.
    const size_t experts = 2 * 3 * size_t(8 * 128 * 256 / 32 * 34);
    const size_t embd = size_t(512 * 256 / 32 * 34);
    CHECK(info.decode_bytes_per_token == info.weight_bytes - embd - experts + experts / 4);
    auto session = model->new_session();
    std::mt19937 rng(3);
    std::vector<int32_t> prompt(16);
    for (auto& t : prompt) t = int32_t(rng() % 512);
    session->prefill(prompt);
    session->decode(int32_t(rng() % 512));
    const auto logits = session->logits();
    REQUIRE(logits.size() == 512);
    for (const float v : logits) REQUIRE(std::isfinite(v));
    CHECK(*std::max_element(logits.begin(), logits.end()) - *std::min_element(logits.begin(), logits.end()) > 1e-3f);
  }
  std::filesystem::remove(path);
}
