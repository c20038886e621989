// Test runner for the real-model tests: skips (exit code 4, which ctest reports as
// "Skipped") with a clear message when Gemma 3 270M has not been downloaded.
#define CATCH_CONFIG_RUNNER
#include <cstdio>
#include <filesystem>

#include "common/catch.hpp"
#include "common/paths.hpp"

int main(int argc, char** argv) {
  const auto model = ember::test::real_model_path();
  if (!std::filesystem::exists(model)) {
    std::printf("SKIPPED: the real model is not at %s; run scripts/fetch-model.sh (or set EMBER_MODEL)\n",
                model.string().c_str());
    return 4;
  }
  return Catch::Session().run(argc, argv);
}
