// The reference backend: host memory and the scalar ops of lib/backend/reference.
// Slow on purpose; it is the yardstick for the CPU and CUDA backends.
#pragma once

#include <memory>

#include "backend/backend.hpp"

namespace ember::reference {

std::unique_ptr<backend::Backend> make_reference_backend();

}  // namespace ember::reference
