// Rendezvous and the default process group (paper §3.3).
//
//   auto pg = ddp::init_process_group();   // env://, as ddprun/torchrun set it
//
// Where ranks meet (InitOptions::init_method):
// - "env://" (default): MASTER_ADDR, MASTER_PORT, and the rank and world size
//   from RANK/WORLD_SIZE (ddprun, torchrun), else OMPI_COMM_WORLD_RANK/_SIZE
//   (mpirun), else SLURM_PROCID/SLURM_NTASKS (srun). LOCAL_RANK and
//   LOCAL_WORLD_SIZE (or their Open MPI and Slurm twins) are read when set.
//   Under srun, an unset MASTER_ADDR is the step's first node
//   (SLURM_STEP_NODELIST) and an unset MASTER_PORT is derived from
//   SLURM_JOB_ID and SLURM_STEP_ID (docs/ddprun.md, "Slurm").
// - "tcp://host:port": rank and world size from the options (or env).
// - "file:///path/to/file": a FileStore on a shared file system.
// Rank 0 hosts a TCPStore (libtorch's c10d) at the master address; the first
// arrival waits for the last within rendezvous_timeout, then TimeoutError
// says how many ranks of how many arrived, and which are missing.
//
// Errors name the variable or option and the expected form (InvalidArgument);
// an unreachable master or a port in use names the address; a master address
// that does not resolve says so at once. Every store call of the rendezvous
// is bounded: a store that accepts but never answers (another program on
// MASTER_PORT, a stopped rank 0) is a TimeoutError shortly after
// rendezvous_timeout.
//
// Backends (include/ddp/backend.h) are chosen by name: InitOptions::backend,
// else $DDP_BACKEND, else "auto" (shared memory within a host, Gloo across
// hosts, both composed hierarchically). A backend that needs no store (mpi) skips
// the store rendezvous and takes rank and size from its own launcher.
//
// DDP_DEBUG=detail wraps the group so that each collective's fingerprint
// (kind, op, dtype, sizes) is compared across ranks before it runs.
#pragma once

#include <ddp/backend.h>
#include <ddp/process_group.h>
#include <ddp/store.h>

#include <torch/arg.h>

#include <chrono>
#include <string>

namespace ddp {

struct InitOptions {
  // The backend's registered name ("gloo", "mpi", ...; ddp::backend_names()
  // lists this build's). Default "": $DDP_BACKEND when set, else "auto".
  TORCH_ARG(std::string, backend) = "";
  // "env://", "tcp://host:port" or "file:///path". Default "env://".
  TORCH_ARG(std::string, init_method) = "env://";
  // This process's rank; -1 (default) reads it from the environment.
  TORCH_ARG(int, rank) = -1;
  // Number of ranks; -1 (default) reads it from the environment.
  TORCH_ARG(int, world_size) = -1;
  // Default timeout of every collective. Default 30 minutes; $DDP_TIMEOUT
  // (seconds) overrides it in init_process_group.
  TORCH_ARG(std::chrono::milliseconds, timeout) = kDefaultTimeout;
  // How long the first rank waits for the last. Default 5 minutes;
  // $DDP_RENDEZVOUS_TIMEOUT_S overrides it.
  TORCH_ARG(std::chrono::milliseconds, rendezvous_timeout) = std::chrono::minutes(5);
  // K > 1 composes K groups of the backend round-robin
  // (RoundRobinProcessGroup). Default 1.
  TORCH_ARG(int, round_robin_groups) = 1;
  // The backend's own options, of its type (GlooOptions for "gloo", ...);
  // their timeout is replaced by `timeout`. Default null: the backend's
  // defaults.
  TORCH_ARG(BackendOptionsPtr, backend_options) = nullptr;
};

// Where this process stands, as read from the environment.
struct LaunchInfo {
  int rank = -1;
  int world_size = -1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;  // empty when not set (under srun: see above)
  int master_port = -1;     // -1 when not set (under srun: see above)
  std::string source;       // which launcher's variables: "torchrun", "openmpi", "slurm"
};

// Reads the launcher's variables (see above). InvalidArgument names a
// missing or malformed variable and the form expected, or a rank outside
// [0, world_size).
LaunchInfo launch_info_from_env();

// Creates the store for `options` (rank 0 hosts the TCPStore) and waits until
// all ranks arrived. The rank and size used are returned through the options.
StorePtr rendezvous(InitOptions& options);

// Rendezvous, then the group; also becomes the default group. Calling it
// twice without destroy_process_group() is an error. For a backend that
// needs no store, its own world replaces the rendezvous; a rank or world
// size given in the options or by another launcher's variables must agree.
ProcessGroupPtr init_process_group(InitOptions options = {});

// The group init_process_group() made; InvalidArgument if there is none.
ProcessGroupPtr default_process_group();
bool is_initialized();
// Forgets the default group (it is destroyed when the last user drops it).
void destroy_process_group();

// Builds a group of `options.backend` on an existing store (no rendezvous
// wait): what init_process_group uses, and what tests use on a HashStore.
// Several groups may share one store: each gets keys of its own (a
// generation per group, counted per rank on the store, then a prefix per
// round-robin member), as long as every rank builds its groups on that store
// in the same order. Groups of different members on one store (subgroups)
// need a PrefixStore of their own each.
// Applies round_robin_groups and the DDP_DEBUG wrapper. `store` may be null
// for a backend that needs none.
ProcessGroupPtr new_process_group(StorePtr store, int rank, int world_size,
                                  const InitOptions& options = {});

}  // namespace ddp
