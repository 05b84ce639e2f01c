// The rendezvous master: where rank 0's store listens, from the environment
// (MASTER_ADDR and MASTER_PORT, derived from the step under srun) or from
// init_method tcp://host:port, and the check made before connecting to it.
#pragma once

#include <ddp/errors.h>
#include <ddp/init.h>

#include <chrono>
#include <string>

namespace ddp::detail {

struct Endpoint {
  std::string host;
  int port = -1;
  std::string source;  // where the host came from, for errors ("MASTER_ADDR")
};

// The context of this rank's errors while it meets the others.
ErrorContext rendezvous_context(const InitOptions& o);

// "host:port" (the host may be [v6]); `what` names the source in errors.
Endpoint parse_endpoint(const std::string& text, const std::string& what);

// MASTER_ADDR and MASTER_PORT; under srun, what the user leaves unset is
// derived from the step (rendezvous/slurm.h). InvalidArgument naming the
// variable when one is missing.
Endpoint master_from_env();

// The host of the rendezvous master named by `options` (MASTER_ADDR for
// env://, under srun derived as above; the host of tcp://host:port); "" for
// file:// or when unset. Backends bind towards it (BackendSetup::master_host).
std::string master_host(const InitOptions& options);

// Resolves the master's host name first, so that a name that does not
// resolve is reported as such at once (TCPStore would retry it until the
// rendezvous timeout and then blame the connection). A temporary resolver
// failure is retried until `deadline`.
void resolve_master(const Endpoint& master, int rank, int world_size,
                    std::chrono::steady_clock::time_point deadline);

}  // namespace ddp::detail
