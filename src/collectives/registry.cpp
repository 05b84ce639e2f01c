// The backend registry: built-in backends are registered on first use, so a
// program sees the same list whatever the order of static initialisation.
#include <ddp/backend.h>

#include <ddp/errors.h>

#include "base/env.h"
#include "base/mutex.h"
#include "collectives/builtin_backends.h"
#include "compat/one_libtorch.h"

#include <c10/util/Type.h>

#include <algorithm>
#include <map>

namespace ddp {
namespace {

// Backends ddp knows of but this build may lack, and what brings them.
const std::map<std::string, std::string>& known_optional_backends() {
  static const std::map<std::string, std::string> known = {
      {"mpi",
       "it needs Open MPI at build time (Debian: libopenmpi-dev, openmpi-bin; "
       "scripts/install-deps.sh installs them), then a rebuild"},
      {"nccl",
       "it needs a libtorch built with CUDA (pip's torch, as scripts/install-deps.sh installs "
       "it) and NCCL's header at build time, then a rebuild"},
  };
  return known;
}

struct Registry {
  Mutex mutex;
  std::map<std::string, Backend> backends DDP_GUARDED_BY(mutex);
};

void add(Registry& registry, Backend backend) {
  if (backend.name.empty()) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "register_backend", {}}, "the name is empty");
  }
  // register_backend('<name>'): which registration is refused.
  const ErrorContext named{-1, 0, "", "register_backend('" + backend.name + "')", {}};
  if (!backend.create) throw InvalidArgument(named, "no create function");
  if (!backend.needs_store && !backend.world) {
    throw InvalidArgument(named, "a backend that needs no store must say its world");
  }
  MutexLock lock(registry.mutex);
  auto name = backend.name;
  if (!registry.backends.emplace(name, std::move(backend)).second) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "register_backend", {}},
                          "a backend named '" + name + "' is already registered");
  }
}

Registry& registry() {
  static Registry* instance = [] {
    auto* r = new Registry;  // never destroyed: groups may outlive static destruction
    add(*r, detail::gloo_backend());
    add(*r, detail::shm_backend());
    add(*r, detail::hierarchical_backend());
    add(*r, detail::auto_backend());
#ifdef DDP_WITH_MPI
    add(*r, detail::mpi_backend());
#endif
#ifdef DDP_WITH_NCCL
    add(*r, detail::nccl_backend());
#endif
    return r;
  }();
  return *instance;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

void register_backend(Backend backend) { add(registry(), std::move(backend)); }

const Backend& find_backend(const std::string& name, const std::string& chosen_by) {
  // Every group is made through here: a process with two libtorchs stops
  // before its first collective, with a reason rather than a crash.
  compat::check_one_libtorch();
  Registry& r = registry();
  {
    MutexLock lock(r.mutex);
    auto it = r.backends.find(name);
    if (it != r.backends.end()) return it->second;  // entries are never removed
  }
  std::string message = "backend '" + name + "' is not available in this build";
  auto known = known_optional_backends().find(name);
  if (known != known_optional_backends().end()) message += ": " + known->second;
  throw InvalidArgument(message + ". Available: " + joined(backend_names()) + " (chosen by " +
                        chosen_by + ")");
}

std::vector<std::string> backend_names() {
  Registry& r = registry();
  MutexLock lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, backend] : r.backends) names.push_back(name);
  return names;  // std::map keeps them sorted
}

namespace detail {

void refuse_options(const BackendSetup& setup, const std::string& backend, const char* expected) {
  const BackendOptions& given = *setup.options;
  throw InvalidArgument(ErrorContext{setup.rank, setup.world_size, "", "", {}},
                        "InitOptions::backend_options are " + c10::demangle(typeid(given).name()) +
                            ", not " + expected + ", but the backend is " + backend +
                            "; pass std::make_shared<ddp::" + expected + ">(...)");
}

}  // namespace detail

std::string resolve_backend_name(const std::string& requested) {
  if (!requested.empty()) return requested;
  return detail::env_string("DDP_BACKEND").value_or("auto");
}

}  // namespace ddp
