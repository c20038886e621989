// Registration of the CPU backend (every build has it).
#include "common/fail.hpp"
#include "cpu/cpu_backend.hpp"
#include "runtime/backend_registry.hpp"

namespace ember::runtime {

void register_cpu_backend() {
  register_backend({.name = "cpu",
                    .interface_version = kBackendInterfaceVersion,
                    .device_count = [] { return 1; },
                    .create = [](int threads, int index) -> std::unique_ptr<backend::Backend> {
                      if (index != 0)
                        fail(ErrorCode::invalid_argument, "the cpu backend has one device (index 0), not {}", index);
                      return cpu::make_cpu_backend({.threads = threads, .isa = std::nullopt});
                    }});
}

}  // namespace ember::runtime
