#include "runtime/backend_registry.hpp"

#include <mutex>
#include <string>

#include "common/fail.hpp"

namespace ember::runtime {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<BackendFactory> factories;
  bool builtin_done = false;
};

Registry& registry() {
  static Registry r;
  return r;
}

void add(Registry& r, const BackendFactory& f, bool replace) {
  if (f.name.empty() || f.device_count == nullptr || f.create == nullptr)
    fail(ErrorCode::invalid_argument, "register_backend: a factory needs a name, device_count and create");
  if (f.interface_version != kBackendInterfaceVersion)
    fail(ErrorCode::internal, "register_backend: backend '{}' was built for backend interface version {}, this ember has {}",
         f.name, f.interface_version, kBackendInterfaceVersion);
  for (BackendFactory& g : r.factories)
    if (g.name == f.name) {
      if (!replace)
        fail(ErrorCode::invalid_argument, "register_backend: a backend named '{}' is already registered", f.name);
      g = f;
      return;
    }
  r.factories.push_back(f);
}

// Takes the registry's lock, registering the build's backends on first use.
std::unique_lock<std::mutex> ready(Registry& r) {
  std::unique_lock lock(r.mutex);
  if (!r.builtin_done) {
    r.builtin_done = true;
    lock.unlock();
    register_builtin_backends();  // calls register_backend for each
    lock.lock();
  }
  return lock;
}

}  // namespace

void register_backend(const BackendFactory& factory, bool replace) {
  Registry& r = registry();
  // The build's own first, so that a replacement is not undone by them later.
  const auto lock = ready(r);
  add(r, factory, replace);
}

std::vector<BackendFactory> registered_backends() {
  Registry& r = registry();
  const auto lock = ready(r);
  return r.factories;
}

std::optional<BackendFactory> find_backend(std::string_view name) {
  Registry& r = registry();
  const auto lock = ready(r);
  for (const BackendFactory& f : r.factories)
    if (f.name == name) return f;
  return std::nullopt;
}

}  // namespace ember::runtime
