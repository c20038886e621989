// The CUDA backend (NVIDIA GPUs): device memory, transfers and every op of the backend
// contract (cuda/ops/), in first versions that favour correctness over speed and have
// not yet run on a device (docs/cuda.md). Types without a kernel report
// ErrorCode::unsupported.
#pragma once

#include <memory>

#include "backend/backend.hpp"

namespace ember::cuda {

// Number of CUDA devices visible, 0 when there is no driver or device.
int device_count() noexcept;

// A backend on CUDA device `device`. Throws unsupported when no device is present.
std::unique_ptr<backend::Backend> make_cuda_backend(int device = 0);

}  // namespace ember::cuda
