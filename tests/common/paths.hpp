// Where test inputs live, and a uniform way to skip when an input is absent.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ember::test {

// ../shared beside the repository (golden models, tokenizer vectors).
inline std::filesystem::path shared_dir() {
  if (const char* env = std::getenv("EMBER_SHARED_DIR")) return env;
  return EMBER_SHARED_DIR;
}
inline std::filesystem::path golden_dir() { return shared_dir() / "golden"; }
inline std::filesystem::path tokenizer_dir() { return shared_dir() / "tokenizer"; }
// tests/data in the source tree.
inline std::filesystem::path data_dir() { return EMBER_TEST_DATA_DIR; }

// The real model (Gemma 3 270M Q4_K_M), as placed by scripts/fetch-model.sh:
// $EMBER_MODEL, else $EMBER_CACHE_DIR/models/..., else ~/.cache/ember/models/...
inline std::filesystem::path real_model_path() {
  if (const char* env = std::getenv("EMBER_MODEL")) return env;
  std::filesystem::path cache;
  if (const char* env = std::getenv("EMBER_CACHE_DIR")) {
    cache = env;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME")) {
    cache = std::filesystem::path(xdg) / "ember";
  } else if (const char* home = std::getenv("HOME")) {
    cache = std::filesystem::path(home) / ".cache" / "ember";
  }
  return cache / "models" / "gemma-3-270m-q4_k_m.gguf";
}

}  // namespace ember::test

// Ends the current test case with a warning that names the missing input (the shared
// golden files, say, when ../shared is not beside the checkout) instead of failing it.
// For use inside a Catch2 TEST_CASE.
#define EMBER_SKIP_IF_MISSING(input)                                                  \
  do {                                                                                \
    if (!std::filesystem::exists(input)) {                                            \
      WARN("test input " << std::filesystem::path(input) << " not found; skipped"); \
      return;                                                                         \
    }                                                                                 \
  } while (0)
