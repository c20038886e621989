// The CPU backend: host memory, its own thread pool, kernels chosen at run time.
#pragma once

#include <memory>
#include <optional>

#include "backend/backend.hpp"
#include "cpu/kernels/kernels.hpp"

namespace ember::cpu {

struct CpuBackendOptions {
  int threads = 1;               // threads doing the work, the calling thread included (>= 1)
  std::optional<Isa> isa;        // kernel level; default best_isa()
};

std::unique_ptr<backend::Backend> make_cpu_backend(const CpuBackendOptions& options);

}  // namespace ember::cpu
