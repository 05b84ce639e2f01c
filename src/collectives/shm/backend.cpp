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
    auto options = options_for<ShmOptions>(setup, "shm", "ShmOptions");
    options.timeout(setup.timeout);
    return std::make_shared<ShmProcessGroup>(setup.store, setup.rank, setup.world_size, options);
  };
  return b;
}

}  // namespace ddp::detail
