// Logits of every golden model (../shared/golden, computed by llama.cpp) against
// ember's forward pass on the CPU backend. One ctest test per file runs the case
// named after it; each prints the maxrel and argmax agreement it reached.
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "common/catch.hpp"
#include "common/paths.hpp"
#include "backend/ops/get_rows.hpp"
#include "backend/ops/matmul.hpp"
#include "backend/reference/reference_backend.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/kernels/kernels.hpp"
#include "cpu/kernels/repack.hpp"
#include "ember/error.hpp"
#include "model/golden_run.hpp"

using namespace ember;

namespace {


// Tolerances of ../shared/golden/README.md by weight format. Files whose matrices are
// all Q8_0, Q5_0, Q4_K or Q6_K must be bit-identical: ember performs llama.cpp's float
// operations in its order for those formats (lib/quant/lanes.hpp, docs/model.md).
struct Tolerance {
  double maxrel;
  double argmax;
  bool exact = false;
};
Tolerance tolerance_for(const std::string& name) {
  if (name.ends_with("-F16")) return {5e-3, 0.98};
  if (name.ends_with("-BF16")) return {1e-2, 0.98};
  for (const char* suffix : {"-Q8_0", "-Q5_0", "-Q4_K_M", "-Q6_K"})
    if (name.ends_with(suffix)) return {0.0, 1.0, true};
  return {5e-2, 0.90};
}

void check_golden(const std::string& name) {
  if (!std::filesystem::exists(test::golden_dir() / (name + ".gguf"))) {
    WARN("golden model " << name << " not found under " << test::golden_dir() << "; skipped");
    return;
  }
  const test::GoldenCase g = test::read_golden(test::golden_dir(), name);
  auto be = cpu::make_cpu_backend({.threads = 2});
  const std::vector<float> ours = test::run_golden(name, *be, g);
  const test::Agreement a = test::compare_logits(ours, g.logits, g.vocab);
  const Tolerance tol = tolerance_for(name);
  std::printf("golden %-14s maxrel %.3e (limit %.0e%s)  argmax agreement %5.1f %% (limit %.0f %%)\n", name.c_str(),
              a.maxrel, tol.maxrel, tol.exact ? ": bit-identical" : "", 100.0 * a.argmax_agree, 100.0 * tol.argmax);
  CHECK(a.maxrel <= tol.maxrel);
  CHECK(a.argmax_agree >= tol.argmax);
  if (tol.exact) CHECK(ours == g.logits);
  // Q4_0 in the rows8 layout (AVX2 and AVX-512 levels, repacked at load) sums each row block by
  // block with one FMA per block, as llama.cpp's repacked Q4_0 does: the same bits.
  if (name == "llama-Q4_0" && cpu::weight_kernels(cpu::best_isa(), quant::DType::q4_0).repacked.dot_tile &&
      !(std::getenv("EMBER_CPU_REPACK") && std::string(std::getenv("EMBER_CPU_REPACK")) == "0"))
    CHECK(ours == g.logits);
}

}  // namespace

TEST_CASE("golden llama-F16", "[golden]") { check_golden("llama-F16"); }
TEST_CASE("golden llama-BF16", "[golden]") { check_golden("llama-BF16"); }
TEST_CASE("golden llama-Q8_0", "[golden]") { check_golden("llama-Q8_0"); }
TEST_CASE("golden llama-Q4_0", "[golden]") { check_golden("llama-Q4_0"); }
TEST_CASE("golden llama-Q4_1", "[golden]") { check_golden("llama-Q4_1"); }
TEST_CASE("golden llama-Q5_0", "[golden]") { check_golden("llama-Q5_0"); }
TEST_CASE("golden llama-Q5_1", "[golden]") { check_golden("llama-Q5_1"); }
TEST_CASE("golden llama-Q4_K_M", "[golden]") { check_golden("llama-Q4_K_M"); }
TEST_CASE("golden llama-Q5_K_M", "[golden]") { check_golden("llama-Q5_K_M"); }
TEST_CASE("golden llama-Q6_K", "[golden]") { check_golden("llama-Q6_K"); }
TEST_CASE("golden qwen2-Q8_0", "[golden]") { check_golden("qwen2-Q8_0"); }
TEST_CASE("golden qwen3-Q8_0", "[golden]") { check_golden("qwen3-Q8_0"); }
TEST_CASE("golden gemma3-Q8_0", "[golden]") { check_golden("gemma3-Q8_0"); }
TEST_CASE("golden gemma3-Q4_K_M", "[golden]") { check_golden("gemma3-Q4_K_M"); }

// The CPU backend's load-time layout (Backend::prepare_weight) on a real file:
// which matrices change, that the file's bytes stay reachable through
// Weights::plain, that the repacked matrices give the file's results through matmul,
// and that every other reader rejects them. The golden cases above run through it.
TEST_CASE("repacked matrices of a Q4_0 file", "[golden][repack]") {
  const std::string name = "llama-Q4_0";
  if (!std::filesystem::exists(test::golden_dir() / (name + ".gguf"))) {
    WARN("golden model " << name << " not found under " << test::golden_dir() << "; skipped");
    return;
  }
  for (const bool repack : {true, false}) {
    cpu::CpuBackendOptions options{.threads = 2};
    options.repack_weights = repack;
    auto be = cpu::make_cpu_backend(options);
    auto model = model::LoadedModel::open(test::golden_dir() / (name + ".gguf"), *be);
    const model::Weights plain_weights = model->weights;
    model->weights.prepare_for_matmul(*be);
    const bool level_repacks = cpu::weight_kernels(cpu::best_isa(), quant::DType::q4_0).repacked.dot_tile != nullptr;
    const model::LayerWeights& l = model->weights.layers[0];
    const model::LayerWeights& p = plain_weights.layers[0];
    INFO("repack " << repack << ", level " << cpu::isa_name(cpu::best_isa()));
    REQUIRE(l.wq.type == quant::DType::q4_0);
    CHECK(int(l.wq.layout) == (repack && level_repacks ? int(cpu::kLayoutRows8) : 0));
    CHECK(model->weights.token_embd.layout == 0);  // get_rows reads it
    for (const auto& [t, orig] : {std::pair{&l.wq, &p.wq}, std::pair{&l.wv, &p.wv}, std::pair{&l.w_down, &p.w_down}}) {
      const backend::Tensor back = model->weights.plain(*t);
      CHECK(back.layout == 0);
      CHECK(back.buffer == orig->buffer);
      CHECK(back.offset == orig->offset);
      CHECK(back.rows == orig->rows);
    }
    if (l.wq.layout == 0) continue;
    // matmul of the repacked matrix against the file's matrix on the reference backend.
    auto ref = reference::make_reference_backend();
    const int64_t n_tok = 5, n_in = l.wq.cols, n_out = l.wq.rows;
    auto x_buf = be->allocate(size_t(n_tok * n_in) * 4), y_buf = be->allocate(size_t(n_tok * n_out) * 4),
         r_buf = be->allocate(size_t(n_tok * n_out) * 4);
    const backend::Tensor x = backend::make_tensor(*x_buf, 0, quant::DType::f32, n_tok, n_in);
    for (int64_t i = 0; i < n_tok * n_in; ++i) x.row_ptr<float>(0)[i] = float((i * 37) % 19) / 9.0f - 1.0f;
    const backend::Tensor y = backend::make_tensor(*y_buf, 0, quant::DType::f32, n_tok, n_out);
    const backend::Tensor r = backend::make_tensor(*r_buf, 0, quant::DType::f32, n_tok, n_out);
    ops::matmul(*be, l.wq, x, y);
    ops::matmul(*ref, p.wq, x, r);
    for (int64_t i = 0; i < n_tok * n_out; ++i) {
      const float want = r.row_ptr<float>(0)[i];
      CHECK(std::fabs(y.row_ptr<float>(0)[i] - want) <= 1e-4f * (1.0f + std::fabs(want)));
    }
    // Other readers: a typed error, not wrong numbers.
    auto ids_buf = be->allocate(4);
    const backend::Tensor ids = backend::make_tensor(*ids_buf, 0, quant::DType::i32, 1, 1);
    ids.row_ptr<int32_t>(0)[0] = 0;
    auto row_buf = be->allocate(size_t(n_in) * 4);
    const backend::Tensor row = backend::make_tensor(*row_buf, 0, quant::DType::f32, 1, n_in);
    try {
      ops::get_rows(*be, l.wq, ids, row);
      FAIL("get_rows read a repacked matrix");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
    }
    try {
      ops::matmul(*ref, l.wq, x, r);
      FAIL("the reference backend read a repacked matrix");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
    }
    CHECK_THROWS_AS(l.wq.slice_rows(3, 8), Error);
    CHECK_NOTHROW(l.wq.slice_rows(8, 8));
  }
}
