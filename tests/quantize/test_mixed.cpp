// Mixed precision by sensitivity (lib/quantize/mixed.hpp, quantize_model --budget/--bpw):
// the budget holds, the greedy mixture beats a uniform type of the same size on the
// summed sensitivity, the extremes, and the error paths.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/catch.hpp"
#include "common/expect_error.hpp"
#include "common/paths.hpp"
#include "ember/quantize.hpp"
#include "gguf/gguf.hpp"
#include "quant/quant.hpp"
#include "quantize/mixed.hpp"
#include "quantize/output_error.hpp"
#include "quantize/type_rules.hpp"

namespace fs = std::filesystem;
using ember::ErrorCode;
using ember::quant::DType;
using ember::test::expect_error;
namespace q = ember::quantize;

namespace {

fs::path llama_f16() { return ember::test::golden_dir() / "llama-F16.gguf"; }

std::vector<q::TensorPlan> plans_of(const ember::gguf::File& file, q::Recipe recipe) {
  std::vector<q::TensorShape> shapes;
  for (size_t i = 0; i < file.tensors().size(); ++i) {
    const auto& t = file.tensors()[i];
    shapes.push_back({.name = std::string(t.name), .type = t.type, .shape = t.shape, .index = i});
  }
  const q::ModelFacts facts{.arch = "llama", .n_layer = int64_t(file.get_uint("llama.block_count")), .n_expert = 0,
                            .n_head = 0, .n_head_kv = 0};
  return q::plan_types(shapes, facts, recipe, false);
}

uint64_t data_bytes(const ember::gguf::File& file, const std::vector<q::TensorPlan>& plans) {
  uint64_t total = 0;
  for (const q::TensorPlan& p : plans) {
    const auto& t = file.tensors()[p.index];
    total += p.quantize ? ember::quant::row_bytes(p.type, t.cols()) * uint64_t(t.rows()) : t.n_bytes;
  }
  return total;
}

// D(t, type) as mixed.hpp defines it, without a Hessian.
double sensitivity(const ember::gguf::File& file, const q::TensorPlan& p, DType type) {
  const auto& t = file.tensors()[p.index];
  std::vector<float> w(size_t(t.rows() * t.cols()));
  const size_t row = ember::quant::row_bytes(t.type, t.cols());
  for (int64_t r = 0; r < t.rows(); ++r)
    ember::quant::dequantize_row(t.type, t.data + size_t(r) * row, w.data() + r * t.cols(), t.cols());
  const q::OutputError measure(nullptr, t.cols());
  const std::vector<int64_t> rows = q::sample_rows(t.rows(), 256);
  q::AwqMatrix m{.weights = w.data(), .rows = t.rows(), .cols = t.cols(), .type = type, .row_scale = nullptr};
  return measure.error(m, {}, rows) / measure.energy(m, rows);
}

}  // namespace

TEST_CASE("a mixture within a budget has less summed sensitivity than a uniform type of its size", "[quantize][mixed]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const auto file = ember::gguf::File::open(llama_f16());
  const std::vector<q::TensorPlan> base = plans_of(file, q::Recipe::q4_k);
  // The uniform alternative: every layer projection in Q5_K.
  std::vector<q::TensorPlan> uniform = base;
  std::vector<size_t> projections;
  for (size_t i = 0; i < uniform.size(); ++i) {
    const auto& t = file.tensors()[uniform[i].index];
    if (uniform[i].quantize && t.name.rfind("blk.", 0) == 0) {
      uniform[i].type = DType::q5_k;
      projections.push_back(i);
    }
  }
  REQUIRE(projections.size() >= 7);
  const uint64_t budget = data_bytes(file, uniform);
  std::vector<q::TensorPlan> mixed = base;
  int64_t progress = 0;
  const auto chosen = q::mix_types(file, mixed, nullptr, DType::q4_k, {.budget_bytes = budget, .threads = 2},
                                   [&](int64_t done, int64_t) { progress = std::max(progress, done); });
  CHECK(progress == int64_t(projections.size()));
  REQUIRE(chosen.size() == projections.size());
  CHECK(data_bytes(file, mixed) <= budget);
  double sum_mixed = 0, sum_uniform = 0;
  bool several_types = false;
  for (const q::MixChoice& c : chosen) {
    const DType type = mixed[c.plan].type;
    CHECK(c.sensitivity == Approx(sensitivity(file, mixed[c.plan], type)).epsilon(1e-6));
    sum_mixed += c.sensitivity;
    sum_uniform += sensitivity(file, mixed[c.plan], DType::q5_k);
    several_types = several_types || type != mixed[chosen[0].plan].type;
  }
  INFO("summed sensitivity: mixture " << sum_mixed << ", uniform Q5_K " << sum_uniform);
  CHECK(several_types);
  CHECK(sum_mixed < sum_uniform);
  // Everything outside the layers keeps the recipe's type.
  for (size_t i = 0; i < base.size(); ++i)
    if (std::find(projections.begin(), projections.end(), i) == projections.end()) CHECK(mixed[i].type == base[i].type);
}

TEST_CASE("mixture budgets: the smallest, the largest and too small", "[quantize][mixed]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const auto file = ember::gguf::File::open(llama_f16());
  const std::vector<q::TensorPlan> base = plans_of(file, q::Recipe::q4_k);
  std::vector<q::TensorPlan> plans = base;
  // A huge budget: every projection in the widest type of the ladder.
  for (const q::MixChoice& c : q::mix_types(file, plans, nullptr, DType::q4_k, {.budget_bytes = uint64_t(1) << 40}))
    CHECK(plans[c.plan].type == DType::q8_0);
  // Exactly the smallest mixture: every projection in Q4_K.
  plans = base;
  const uint64_t smallest = data_bytes(file, base);
  for (const q::MixChoice& c : q::mix_types(file, plans, nullptr, DType::q4_k, {.budget_bytes = smallest}))
    CHECK(plans[c.plan].type == DType::q4_k);
  plans = base;
  expect_error([&] { (void)q::mix_types(file, plans, nullptr, DType::q4_k, {.budget_bytes = smallest - 1}); },
               ErrorCode::invalid_argument, "below the smallest mixture");
  // The legacy ladder.
  CHECK(q::mix_ladder(DType::q4_0) == std::vector<DType>{DType::q4_0, DType::q5_0, DType::q8_0});
}

TEST_CASE("quantize --bpw writes a file within its budget; bad budgets are typed errors", "[quantize][mixed]") {
  EMBER_SKIP_IF_MISSING(llama_f16());
  const fs::path dir = fs::temp_directory_path() / ("ember_test_mixed_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path out = dir / "mix.gguf";
  ember::QuantizeOptions options;
  options.recipe = ember::QuantRecipe::q4_k;
  options.threads = 2;
  options.target_bpw = 6.0;
  const ember::QuantizeReport r = ember::quantize_model(llama_f16().string(), out.string(), options);
  CHECK(r.budget_bytes > 0);
  CHECK(r.bytes_out <= r.budget_bytes);
  CHECK(r.bytes_out > r.budget_bytes * 9 / 10);
  size_t mixed = 0;
  for (const ember::QuantizedTensor& t : r.tensors) mixed += t.mixed;
  CHECK(mixed >= 7);
  const auto written = ember::gguf::File::open(out);
  CHECK(written.tensors().size() == r.tensors.size());

  options.budget_bytes = 1000;
  expect_error([&] { ember::quantize_model(llama_f16().string(), out.string(), options); }, ErrorCode::invalid_argument,
               "not both");
  options.target_bpw = 0;
  expect_error([&] { ember::quantize_model(llama_f16().string(), (dir / "x.gguf").string(), options); },
               ErrorCode::invalid_argument, "below the smallest mixture");
  CHECK_FALSE(fs::exists(dir / "x.gguf"));
  options.budget_bytes = 0;
  options.target_bpw = 6;
  options.pure = true;
  expect_error([&] { ember::quantize_model(llama_f16().string(), out.string(), options); }, ErrorCode::invalid_argument,
               "--pure");
  fs::remove_all(dir);
}
