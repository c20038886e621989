// Uses the public API with nothing but <ember/ember.hpp>: version macros, error
// codes, option defaults, and the errors of bad input. Built against ember::ember
// only, the way a host builds.
#include <cstdio>
#include <cstring>

#include <ember/ember.hpp>

#if !defined(EMBER_VERSION) || !defined(EMBER_API_VERSION) || !defined(EMBER_VERSION_STRING)
#error "version macros missing"
#endif

static int failures = 0;
#define EXPECT(cond)                                                  \
  do {                                                                \
    if (!(cond)) {                                                    \
      std::fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                     \
    }                                                                 \
  } while (0)

EMBER_DEPRECATED("use new_thing") static int old_thing() { return 1; }

int main() {
  EXPECT(std::strcmp(ember::version_string(), EMBER_VERSION_STRING) == 0);
  EXPECT(ember::api_version() == EMBER_API_VERSION);
  EXPECT(std::strcmp(ember::to_string(ember::ErrorCode::cache_full), "cache_full") == 0);
  EXPECT(std::strcmp(ember::to_string(ember::StopReason::stop_string), "stop_string") == 0);

  const ember::SessionOptions session;
  EXPECT(session.kv.max_tokens == 4096 && session.kv.eviction == ember::KVEviction::none);
  EXPECT(session.kv.storage == ember::KVStorage::f16);
  EXPECT(session.prefill_chunk_size == 512);
  const ember::GenerateOptions generate;
  EXPECT(generate.max_tokens == 256 && generate.stop_at_end_of_generation);

  try {
    ember::Model::load("/definitely/not/here.gguf");
    EXPECT(false);
  } catch (const ember::Error& e) {
    EXPECT(e.code() == ember::ErrorCode::io);
  }
  try {
    ember::Sampler bad({.temperature = -1.0f});
    EXPECT(false);
  } catch (const ember::Error& e) {
    EXPECT(e.code() == ember::ErrorCode::invalid_argument);
    EXPECT(std::strstr(e.what(), "temperature") != nullptr);
  }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  EXPECT(old_thing() == 1);
#pragma GCC diagnostic pop
  if (failures == 0) std::printf("public API: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
