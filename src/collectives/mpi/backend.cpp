// The registry entry of the MPI backend: no store (MPI's launcher made the
// world), rank and size from MPI itself. As a part of a composed group
// (BackendSetup::world_ranks) it builds a group of some of MPI's ranks,
// after they met on the store.
#include <ddp/backend.h>
#include <ddp/backends/mpi.h>
#include <ddp/errors.h>

#include "collectives/builtin_backends.h"
#include "collectives/mpi/runtime.h"
#include "rendezvous/arrival.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace ddp::detail {
namespace {

// MPI_Comm_create_group waits for every member without a deadline. So the
// members meet on the store first, bounded, each saying which MPI rank it
// is: a missing member is a TimeoutError naming it, and ranks that are not
// MPI's (a launcher's RANK overriding mpirun's) an InvalidArgument on every
// member, before any of them enters MPI.
void meet_on_store(const BackendSetup& setup) {
  const int mine = mpi::world().rank;
  setup.store->set("mpi_rank/" + std::to_string(setup.rank),
                   std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(&mine),
                                        reinterpret_cast<const uint8_t*>(&mine) + sizeof mine));
  wait_for_all_ranks(setup.store, setup.rank, setup.world_size, setup.timeout, "mpi group");
  for (int r = 0; r < setup.world_size; ++r) {
    const auto bytes = setup.store->get("mpi_rank/" + std::to_string(r));
    int theirs = -1;
    if (bytes.size() == sizeof theirs) std::copy(bytes.begin(), bytes.end(),
                                                 reinterpret_cast<uint8_t*>(&theirs));
    if (theirs != setup.world_ranks[r]) {
      throw InvalidArgument(
          "ddp: rank " + std::to_string(setup.world_ranks[setup.rank]) + ": backend 'mpi': " +
          "the member expected to be job rank " + std::to_string(setup.world_ranks[r]) +
          " is MPI rank " + std::to_string(theirs) +
          ". The job's ranks must be MPI's: under mpirun, do not set RANK or WORLD_SIZE");
    }
  }
}

}  // namespace

Backend mpi_backend() {
  Backend backend;
  backend.name = "mpi";
  backend.summary = "MPI (Open MPI) collectives; launch with mpirun or srun";
  backend.needs_store = false;
  backend.world = [] { return mpi::world(); };
  backend.create = [](const BackendSetup& setup) -> ProcessGroupPtr {
    auto options = options_for<MpiOptions>(setup, "mpi", "MpiOptions");
    if (!setup.world_ranks.empty() && setup.store) meet_on_store(setup);
    auto group = std::make_shared<MpiProcessGroup>(setup.timeout, options, setup.index,
                                                   setup.world_ranks);
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
