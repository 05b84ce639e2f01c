// The backends built into this library, each defined in its own folder under
// src/collectives/. A new backend adds its entry function here and to the
// list in registry.cpp; nothing above the collective layer changes.
#pragma once

#include <ddp/backend.h>

#include <string>

namespace ddp::detail {

// InvalidArgument: `setup` carries options of another type than `expected`,
// the options type of `backend`.
[[noreturn]] void refuse_options(const BackendSetup& setup, const std::string& backend,
                                 const char* expected);

// The options `setup` carries for `backend`, as its own type O (O's
// defaults when it carries none); `expected` is O's name, for the error.
template <typename O>
O options_for(const BackendSetup& setup, const std::string& backend, const char* expected) {
  if (!setup.options) return O();
  auto* options = dynamic_cast<const O*>(setup.options.get());
  if (!options) refuse_options(setup, backend, expected);
  return *options;
}

Backend gloo_backend();          // collectives/gloo/backend.cpp
Backend shm_backend();           // collectives/shm/backend.cpp
Backend hierarchical_backend();  // collectives/hierarchical/backend.cpp
Backend auto_backend();          // collectives/hierarchical/backend.cpp
#ifdef DDP_WITH_MPI
Backend mpi_backend();  // collectives/mpi/backend.cpp
#endif
#ifdef DDP_WITH_NCCL
Backend nccl_backend();  // collectives/nccl/backend.cpp
#endif

}  // namespace ddp::detail
