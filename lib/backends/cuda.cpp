// Registration of the CUDA backend (builds configured with EMBER_CUDA and nvcc only:
// lib/CMakeLists.txt adds this file and its call).
#include "cuda/cuda_backend.hpp"
#include "runtime/backend_registry.hpp"

namespace ember::runtime {

void register_cuda_backend() {
  register_backend({.name = "cuda",
                    .interface_version = kBackendInterfaceVersion,
                    .device_count = [] { return cuda::device_count(); },
                    .create = [](int threads, int index) { return cuda::make_cuda_backend(index); }});
}

}  // namespace ember::runtime
