// Creates the backend a Device names.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "backend/backend.hpp"
#include "ember/model.hpp"

namespace ember::runtime {

// A backend for device `index` of kind `device`, using `threads` threads (CPU). Throws
// unsupported when the device is not available in this build or on this machine, and
// invalid_argument for an index that does not exist.
// The backend comes from the registry (runtime/backend_registry.hpp) under
// device_name(device).
std::unique_ptr<backend::Backend> make_backend(Device device, int threads, int index = 0);
// The registry name of a Device ("cpu", "cuda").
std::string_view device_name(Device device);

// Physical cores among the CPUs this process may run on (its affinity mask), SMT
// siblings counted once; every allowed CPU when the topology cannot be read.
int physical_cores();
// The kernel level CPU backends made now run (cpu::best_isa(): EMBER_CPU_ISA applied).
std::string cpu_kernel_level();
// Threads to use when the host asked for 0: physical_cores().
int default_threads();

}  // namespace ember::runtime
