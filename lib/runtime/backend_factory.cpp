#include "runtime/backend_factory.hpp"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "common/fail.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/kernels/kernels.hpp"
#include "runtime/backend_registry.hpp"

namespace ember::runtime {

namespace {

// Reads one integer from a sysfs file; -1 when it cannot.
long read_long(const std::string& path) {
  std::ifstream in(path);
  long v = -1;
  return (in >> v) ? v : -1;
}

}  // namespace

int physical_cores() {
  // The CPUs this process may run on, grouped by (package, core): SMT siblings
  // share a core's execution units, so a second thread on them adds little to
  // matrix work and slows memory-bound decode.
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : int(n);
  }
  std::set<std::pair<long, long>> cores;
  bool topology = true;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    const long core = read_long(dir + "core_id"), package = read_long(dir + "physical_package_id");
    topology = topology && core >= 0 && package >= 0;
    cores.insert({topology ? package : 0, topology ? core : long(cpu)});
  }
  // Without a readable topology every allowed CPU counts as a core.
  if (!topology) return std::max(1, CPU_COUNT(&set));
  return std::max<int>(1, int(cores.size()));
}

int default_threads() { return physical_cores(); }

std::string cpu_kernel_level() { return std::string(cpu::isa_name(cpu::best_isa())); }

std::string_view device_name(Device device) {
  switch (device) {
    case Device::cpu: return "cpu";
    case Device::cuda: return "cuda";
  }
  fail(ErrorCode::invalid_argument, "unknown device {}", int(device));
}

std::unique_ptr<backend::Backend> make_backend(Device device, int threads, int index) {
  const std::string_view name = device_name(device);
  const std::optional<BackendFactory> factory = find_backend(name);
  if (!factory) {
    if (device == Device::cuda)
      fail(ErrorCode::unsupported, "this build of ember has no CUDA backend (configure with EMBER_CUDA=ON and nvcc)");
    fail(ErrorCode::unsupported, "this build of ember has no {} backend", name);
  }
  return factory->create(threads, index);
}

}  // namespace ember::runtime
