#include "runtime/backend_factory.hpp"

#include <thread>

#include "common/fail.hpp"
#include "cpu/cpu_backend.hpp"

#if defined(EMBER_HAVE_CUDA)
#include "cuda/cuda_backend.hpp"
#endif

namespace ember::runtime {

int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

std::unique_ptr<backend::Backend> make_backend(Device device, int threads) {
  switch (device) {
    case Device::cpu:
      return cpu::make_cpu_backend({.threads = threads});
    case Device::cuda:
#if defined(EMBER_HAVE_CUDA)
      return cuda::make_cuda_backend();
#else
      fail(ErrorCode::unsupported, "this build of ember has no CUDA backend (configure with EMBER_CUDA=ON and nvcc)");
#endif
  }
  fail(ErrorCode::invalid_argument, "unknown device {}", int(device));
}

}  // namespace ember::runtime
