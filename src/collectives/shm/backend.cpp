// The registry's entry for the shm backend.
#include "collectives/builtin_backends.h"

#include <ddp/backend.h>
#include <ddp/backends/shm.h>
#include <ddp/errors.h>

#include <torch/csrc/distributed/c10d/Store.hpp>


namespace ddp::detail {

Backend shm_backend() {
  Backend b;
  b.name = "shm";
  b.summary = "shared memory (/dev/shm); every rank on one host";
  b.needs_store = true;
  b.create = [](const BackendSetup& setup) -> ProcessGroupPtr {
    ShmOptions options;
    if (setup.options) {
      auto* shm = dynamic_cast<const ShmOptions*>(setup.options.get());
      if (!shm) {
        throw InvalidArgument("ddp: rank " + std::to_string(setup.rank) +
                              ": InitOptions::backend_options are not ShmOptions, but the "
                              "backend is shm; pass std::make_shared<ddp::ShmOptions>(...)");
      }
      options = *shm;
    }
    options.timeout(setup.timeout);
    return std::make_shared<ShmProcessGroup>(setup.store, setup.rank, setup.world_size, options);
  };
  return b;
}

}  // namespace ddp::detail
