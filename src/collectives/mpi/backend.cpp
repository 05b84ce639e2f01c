// The registry entry of the MPI backend: no store (MPI's launcher made the
// world), rank and size from MPI itself. Given a store (as a part of a
// composed group, or under auto), it builds its group after the members met
// on it; given BackendSetup::world_ranks, of those of MPI's ranks alone.
#include <ddp/backend.h>
#include <ddp/backends/mpi.h>
#include <ddp/errors.h>

#include "base/arrival.h"
#include "collectives/builtin_backends.h"
#include "collectives/mpi/runtime.h"

namespace ddp::detail {
namespace {

// MpiOptions::poll_interval of a part of a composed group (mpi.h).
constexpr std::chrono::microseconds kPartPollInterval(50);

std::string listed(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

// MPI_Init and MPI's communicator calls wait for their peers without a
// deadline. So the members meet on the store first, bounded (a missing
// member is a TimeoutError naming it), then start MPI (a no-op when it
// runs), then exchange their MPI ranks: a job whose ranks are not MPI's (a
// RANK set by hand under mpirun) is an InvalidArgument on every member,
// before any of them enters a collective MPI call.
void meet_on_store(const BackendSetup& setup, const std::vector<int>& members) {
  const std::string who = "the mpi group of job ranks " + listed(members);
  allgather_on_store(setup.store, "mpi_arrived/", setup.rank, setup.world_size, "", setup.timeout,
                     who + " (group ranks here)",
                     ": they did not reach this group; see their output (every rank must "
                     "choose the same backends: DDP_BACKEND, DDP_CROSS_BACKEND).");
  const int mine = mpi::world().rank;
  auto theirs = allgather_on_store(setup.store, "mpi_rank/", setup.rank, setup.world_size,
                                   std::to_string(mine), setup.timeout, who, ".");
  for (int r = 0; r < setup.world_size; ++r) {
    if (theirs[r] != std::to_string(members[r])) {
      // In the job's ranks, about the one that is not MPI's.
      throw InvalidArgument(ErrorContext{members[setup.rank], 0, "", "backend 'mpi'", {members[r]}},
                            "job rank " + std::to_string(members[r]) + " is MPI rank " + theirs[r] +
                                ". The job's ranks must be MPI's: under mpirun, do not set RANK "
                                "or WORLD_SIZE");
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
    // A part of a composed group is built with world_ranks; a group of its
    // own (init_process_group, new_process_group, even on a store) spins.
    if (!setup.options && !setup.world_ranks.empty()) options.poll_interval(kPartPollInterval);
    std::vector<int> members = setup.world_ranks;
    if (members.empty()) {
      for (int r = 0; r < setup.world_size; ++r) members.push_back(r);
    } else if (static_cast<int>(members.size()) != setup.world_size) {
      throw InvalidArgument(ErrorContext{-1, 0, "", "backend 'mpi'", {}},
                            "BackendSetup::world_ranks lists " + std::to_string(members.size()) +
                                " ranks for a group of " + std::to_string(setup.world_size));
    }
    if (setup.store) meet_on_store(setup, members);
    auto group = std::make_shared<MpiProcessGroup>(setup.timeout, options, setup.index,
                                                   setup.world_ranks);
    if (group->rank() != setup.rank || group->size() != setup.world_size) {
      throw InvalidArgument(ErrorContext{-1, 0, "", "backend 'mpi'", {}},
                            "asked for rank " + std::to_string(setup.rank) + " of " +
                                std::to_string(setup.world_size) + " but MPI's world has " +
                                "this process as rank " + std::to_string(group->rank()) + " of " +
                                std::to_string(group->size()) +
                                "; leave the rank and world size to mpirun/srun");
    }
    return group;
  };
  return backend;
}

}  // namespace ddp::detail
