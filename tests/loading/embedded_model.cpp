// A GGUF file assembled into the test binary's read-only data (the way a game packs
// an asset into its executable), between two symbols.
#include "tests/loading/embedded_model.hpp"

asm(".section .rodata\n"
    ".balign 64\n"
    "ember_test_embedded_begin:\n"
    ".incbin \"" EMBER_EMBED_PATH "\"\n"
    "ember_test_embedded_end:\n"
    ".previous\n");

extern "C" const std::byte ember_test_embedded_begin[];
extern "C" const std::byte ember_test_embedded_end[];

namespace ember::test {
std::span<const std::byte> embedded_model() {
  return {ember_test_embedded_begin, size_t(ember_test_embedded_end - ember_test_embedded_begin)};
}
}  // namespace ember::test
