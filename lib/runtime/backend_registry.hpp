// The backends this build of ember has, looked up by name.
//
// Each backend kind registers one BackendFactory. Which kinds a build has is decided
// by the build alone (lib/CMakeLists.txt generates the list of registrations from
// the configured backends; lib/backends/<kind>.cpp holds each registration), so no
// code outside a backend's own directory and its registration file names it.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"

namespace ember::runtime {

// The version of the Backend interface (lib/backend/backend.hpp, tensor.hpp and the op
// contracts in lib/backend/ops). A factory states the version its backend was built
// against; registering another version fails, so a backend written for an older
// contract cannot be linked in unnoticed. 2: Backend::prepare_weight, Tensor::layout
// and Backend::supports.
constexpr int kBackendInterfaceVersion = 2;

struct BackendFactory {
  std::string_view name;      // "cpu", "cuda": the name ember::Device values map to
  int interface_version = 0;  // kBackendInterfaceVersion of the sources it was built with
  // Devices of this kind this process can use now (0: none, e.g. no driver or GPU).
  int (*device_count)() = nullptr;
  // A backend on device `index` (0 .. device_count() - 1) using `threads` host threads.
  std::unique_ptr<backend::Backend> (*create)(int threads, int index) = nullptr;
};

// Adds a factory; with `replace`, takes the place of the one of that name (a host or a
// test substituting a kind). Throws invalid_argument for a factory without a name or
// functions, or a name already registered (without `replace`); internal for another
// interface version.
void register_backend(const BackendFactory& factory, bool replace = false);
// The registered factories (the build's own first), in registration order.
std::vector<BackendFactory> registered_backends();
// The factory named `name`, if registered.
std::optional<BackendFactory> find_backend(std::string_view name);

// Registration of the build's backends (lib/backends/<kind>.cpp); called once, by the
// registry, before its first lookup.
void register_builtin_backends();
void register_cpu_backend();
void register_cuda_backend();

}  // namespace ember::runtime
