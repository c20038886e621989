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
  // Repack matmul weights at load where the level reads a layout of its own faster
  // (Backend::prepare_weight, cpu/kernels/repack.hpp). The environment variable
  // EMBER_CPU_REPACK=0 turns it off (to compare).
  bool repack_weights = true;
};

std::unique_ptr<backend::Backend> make_cpu_backend(const CpuBackendOptions& options);

}  // namespace ember::cpu
