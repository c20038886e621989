// The CUDA backend (NVIDIA GPUs). At this stage it owns device memory, moves data and
// runs every op but attention (cuda/ops/, first versions, docs/cuda.md); attention
// reports ErrorCode::unsupported, so a host asking for Device::cuda gets a clear error
// instead of wrong results.
#pragma once

#include <memory>

#include "backend/backend.hpp"

namespace ember::cuda {

// Number of CUDA devices visible, 0 when there is no driver or device.
int device_count() noexcept;

// A backend on CUDA device `device`. Throws unsupported when no device is present.
std::unique_ptr<backend::Backend> make_cuda_backend(int device = 0);

}  // namespace ember::cuda
