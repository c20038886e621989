// The GGUF image embedded in the test binary (embedded_model.cpp).
#pragma once

#include <cstddef>
#include <span>

namespace ember::test {
std::span<const std::byte> embedded_model();
}  // namespace ember::test
