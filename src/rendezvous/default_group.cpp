// The groups: new_process_group (a backend's group on a store, or
// round_robin_groups of them, recorded by the flight recorder) and the
// default group that init_process_group makes after the rendezvous.
#include <ddp/init.h>

#include <ddp/backends/round_robin.h>
#include <ddp/errors.h>

#include "base/env.h"
#include "base/mutex.h"
#include "collectives/checked_process_group.h"
#include "collectives/issued_log.h"
#include "flight/recorder.h"
#include "rendezvous/master.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <atomic>

namespace ddp {
namespace {

Mutex default_mutex;
ProcessGroupPtr default_group DDP_GUARDED_BY(default_mutex);

// Counts, per rank, the groups built on a store (new_process_group).
const std::string kGroupsBuiltKey = "ddp_groups_built/rank";

}  // namespace

ProcessGroupPtr new_process_group(StorePtr store, int rank, int world_size,
                                  const InitOptions& options) {
  const Backend& backend = find_backend(resolve_backend_name(options.backend()));
  if (options.round_robin_groups() < 1) {
    throw InvalidArgument("InitOptions::round_robin_groups must be >= 1, got " +
                          std::to_string(options.round_robin_groups()));
  }
  if (backend.needs_store && !store) {
    throw InvalidArgument(
        ErrorContext{rank, world_size, "", "", {}},
        "the " + backend.name + " backend needs a store; new_process_group got none");
  }
  BackendSetup setup;
  setup.rank = rank;
  setup.world_size = world_size;
  setup.timeout = options.timeout();
  setup.master_host = detail::master_host(options);
  setup.options = options.backend_options();
  // Every group built on one store has keys of its own: its generation is
  // the number of groups this rank has built on the store so far, the same
  // on every rank as long as the ranks build their groups in the same order.
  const std::string generation =
      store ? "generation" + std::to_string(store->add(kGroupsBuiltKey + std::to_string(rank), 1))
            : "";
  std::vector<ProcessGroupPtr> groups;
  for (int i = 0; i < options.round_robin_groups(); ++i) {
    setup.index = i;
    setup.store = StorePtr();
    if (store) {
      setup.store =
          c10::make_intrusive<c10d::PrefixStore>(generation + "/group" + std::to_string(i), store);
    }
    groups.push_back(backend.create(setup));
  }
  ProcessGroupPtr group =
      groups.size() == 1 ? groups[0] : std::make_shared<RoundRobinProcessGroup>(std::move(groups));
  if (detail::debug_level_from_env() == detail::DebugLevel::DETAIL) {
    group = std::make_shared<detail::CheckedProcessGroup>(group);
  }
  // A group without a store is named by its number among this process's
  // storeless groups, the same on every rank that builds its groups in the
  // same order.
  static std::atomic<int> storeless_groups{0};
  if (detail::flight::recording()) {
    // Named as its keys are: groups built on different stores can share a
    // name (docs/ddp.md, "Flight recorder").
    detail::record_flights(*group,
                           store ? generation : "storeless" + std::to_string(++storeless_groups));
  }
  return group;
}

namespace {

// A backend that needs no store knows its world from its own launcher; what
// the options or another launcher's variables say must agree with it.
void adopt_backend_world(const Backend& backend, InitOptions& o) {
  BackendWorld world = backend.world();
  LaunchInfo info = launch_info_from_env();
  const int rank = o.rank() >= 0 ? o.rank() : info.rank;
  const int size = o.world_size() >= 0 ? o.world_size() : info.world_size;
  if ((rank >= 0 && rank != world.rank) || (size >= 0 && size != world.world_size)) {
    throw InvalidArgument("the " + backend.name + " backend sees rank " +
                          std::to_string(world.rank) + " of " + std::to_string(world.world_size) +
                          ", but the options or the launcher's "
                          "variables" +
                          (info.source.empty() ? "" : " (" + info.source + ")") + " say rank " +
                          std::to_string(rank) + " of " + std::to_string(size) +
                          ". Start the job with the " + backend.name +
                          " backend's own launcher (mpirun or srun for mpi), or choose "
                          "another backend (DDP_BACKEND=gloo) under ddprun and torchrun.");
  }
  o.rank(world.rank);
  o.world_size(world.world_size);
}

}  // namespace

ProcessGroupPtr init_process_group(InitOptions options) {
  {
    MutexLock lock(default_mutex);
    if (default_group) {
      throw InvalidArgument(
          "init_process_group called twice; call "
          "destroy_process_group() first");
    }
  }
  if (auto seconds = detail::env_int("DDP_TIMEOUT", 1, 1 << 24)) {
    options.timeout(std::chrono::seconds(*seconds));  // a job-wide setting, no recompiling
  }
  const Backend& backend = find_backend(resolve_backend_name(options.backend()));
  StorePtr store;
  if (backend.needs_store) {
    store = rendezvous(options);
  } else {
    adopt_backend_world(backend, options);
  }
  auto group = new_process_group(store, options.rank(), options.world_size(), options);
  MutexLock lock(default_mutex);
  default_group = group;
  return group;
}

ProcessGroupPtr default_process_group() {
  MutexLock lock(default_mutex);
  if (!default_group) {
    throw InvalidArgument(
        "no default process group: call ddp::init_process_group() "
        "first, or pass a process group in the options");
  }
  return default_group;
}

bool is_initialized() {
  MutexLock lock(default_mutex);
  return default_group != nullptr;
}

void destroy_process_group() {
  MutexLock lock(default_mutex);
  default_group.reset();
}

}  // namespace ddp
