// Backends by name (paper §3.3): the layer under ProcessGroup. A backend is
// registered once under a name ("gloo", "mpi", ...); init_process_group and
// new_process_group build groups of it by that name, so that the Reducer,
// the module, round-robin groups and the DDP_DEBUG wrapper work over any
// backend unchanged.
//
// Contract
// - InitOptions::backend names the backend; when it is empty (the default),
//   $DDP_BACKEND names it, else "auto": shared memory ("shm") within one
//   host, Gloo across hosts, the hierarchical composition when both. An unknown name, or one this
//   build lacks, is an InvalidArgument listing the names this build has.
// - A backend that needs a store (Gloo) is given the rendezvous store, under
//   a prefix unique to the group; one that does not (MPI) is built without a
//   rendezvous, and knows its world itself (Backend::world). Inside a
//   composed group (hierarchical) every backend is given the store and
//   BackendSetup::world_ranks, so that MPI can serve as a part of it.
// - Each backend owns its options: a type derived from BackendOptions
//   (GlooOptions, MpiOptions, ...), passed through
//   InitOptions::backend_options; options of another backend's type are an
//   InvalidArgument naming both.
// - register_backend is thread-safe; a name may be registered once.
#pragma once

#include <ddp/process_group.h>
#include <ddp/store.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ddp {

// Base of every backend's options.
struct BackendOptions {
  virtual ~BackendOptions() = default;
};
using BackendOptionsPtr = std::shared_ptr<const BackendOptions>;

// What a backend builds one group from.
struct BackendSetup {
  // The rendezvous store, under a prefix unique to this group; null for a
  // backend that needs none.
  StorePtr store;
  int rank = 0;
  int world_size = 1;
  // Default timeout of every collective of the group.
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // Host name or address of the rendezvous master (rank 0); "" when unknown
  // (file://, an in-memory store). Gloo binds where it routes to.
  std::string master_host;
  // InitOptions::backend_options(); null means the backend's defaults.
  BackendOptionsPtr options;
  // Which of InitOptions::round_robin_groups this group is (0 for the first).
  int index = 0;
  // The ranks of the job's world that form this group: world_ranks[r] is
  // group rank r's rank in the world the launcher made. Default empty: the
  // whole world, in its own order. A composed group (hierarchical) builds
  // its sub-groups with it; a backend that meets on the store may ignore it,
  // one that knows its world from its launcher (MPI) builds from it.
  std::vector<int> world_ranks;
};

// A backend's own view of the world, for backends launched with one (MPI).
struct BackendWorld {
  int rank = 0;
  int world_size = 1;
};

struct Backend {
  // The name InitOptions::backend and DDP_BACKEND use, e.g. "gloo".
  std::string name;
  // One line for listings, e.g. "TCP through Gloo; any hosts".
  std::string summary;
  // Whether `create` needs the rendezvous store. Default true.
  bool needs_store = true;
  // For a backend that needs no store: its rank and size, as its launcher
  // set them (called before `create`). Null for the others.
  std::function<BackendWorld()> world;
  // Builds one group; may block until every rank built its own.
  std::function<ProcessGroupPtr(const BackendSetup&)> create;
};

// Adds a backend; InvalidArgument if its name is taken or it has no create.
void register_backend(Backend backend);

// The backend registered under `name`; InvalidArgument listing the names
// this build has (and why a known one is missing) otherwise, and saying that
// `chosen_by` named it.
const Backend& find_backend(const std::string& name,
                            const std::string& chosen_by = "InitOptions::backend or DDP_BACKEND");

// The registered names, sorted.
std::vector<std::string> backend_names();

// The name a group is built with: `requested` when not empty, else
// $DDP_BACKEND when set, else "auto".
std::string resolve_backend_name(const std::string& requested);

}  // namespace ddp
