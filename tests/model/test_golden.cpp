// Logits of every golden model (../shared/golden, computed by llama.cpp) against
// ember's forward pass on the CPU backend. One ctest test per file runs the case
// named after it; each prints the maxrel and argmax agreement it reached.
#include <cstdio>
#include <memory>

#include "common/catch.hpp"
#include "common/paths.hpp"
#include "cpu/cpu_backend.hpp"
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
