// The registry entry of the MPI backend: no store (MPI's launcher made the
// world), rank and size from MPI itself.
#include <ddp/backend.h>
#include <ddp/backends/mpi.h>
#include <ddp/errors.h>

#include "collectives/builtin_backends.h"
#include "collectives/mpi/runtime.h"

namespace ddp::detail {

Backend mpi_backend() {
  Backend backend;
  backend.name = "mpi";
  backend.summary = "MPI (Open MPI) collectives; launch with mpirun or srun";
  backend.needs_store = false;
  backend.world = [] { return mpi::world(); };
  backend.create = [](const BackendSetup& setup) -> ProcessGroupPtr {
    auto options = options_for<MpiOptions>(setup, "mpi", "MpiOptions");
    auto group = std::make_shared<MpiProcessGroup>(setup.timeout, options, setup.index);
    if (group->rank() != setup.rank || group->size() != setup.world_size) {
      throw InvalidArgument("ddp: backend 'mpi': asked for rank " + std::to_string(setup.rank) +
                            " of " + std::to_string(setup.world_size) + " but MPI's world has " +
                            "this process as rank " + std::to_string(group->rank()) + " of " +
                            std::to_string(group->size()) +
                            "; leave the rank and world size to mpirun/srun");
    }
    return group;
  };
  return backend;
}

}  // namespace ddp::detail
