// Rendezvous (env://, tcp://, file://): every rank meets the others on a
// store, admitted by the job secret when there is one (rendezvous/admission.h).
#include <ddp/init.h>

#include <ddp/errors.h>

#include "base/arrival.h"
#include "base/bounded.h"
#include "base/env.h"
#include "rendezvous/admission.h"
#include "rendezvous/master.h"
#include "rendezvous/tcp_store.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>

namespace ddp {
namespace {

// Fills rank and world size from the environment where the options leave them.
void resolve_rank(InitOptions& o) {
  LaunchInfo info = launch_info_from_env();
  if (o.rank() < 0) o.rank(info.rank);
  if (o.world_size() < 0) o.world_size(info.world_size);
  if (o.rank() < 0 || o.world_size() < 0) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "init_process_group", {}},
                          "rank and world size are unknown: launch with ddprun, torchrun, "
                          "mpirun or srun (which set RANK/WORLD_SIZE or their twins), or pass "
                          "InitOptions().rank(r).world_size(n)");
  }
  if (o.world_size() < 1 || o.rank() >= o.world_size()) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "init_process_group", {}},
                          "rank " + std::to_string(o.rank()) + " is outside [0, " +
                              std::to_string(o.world_size()) + ") for world size " +
                              std::to_string(o.world_size()));
  }
}

// The store a rank waits for, in errors.
std::string store_name(const std::string& method, const std::optional<detail::Endpoint>& master) {
  return master ? "the rendezvous store at " + master->host + ":" + std::to_string(master->port)
                : "the file store " + method.substr(7);
}

// What to check when the store did not answer: `tcp` (else a file store),
// `connected` (the connection was accepted, so something listens there).
std::string unanswered_store_remedy(bool tcp, bool connected) {
  if (!tcp) return ": the file system does not answer.";
  if (connected) {
    return ": the connection was accepted, so a process listens there, but it does not answer "
           "as rank 0's store would. Another program may hold MASTER_PORT (choose another), or "
           "rank 0 is stopped or cut off.";
  }
  return ". Check MASTER_ADDR/MASTER_PORT and that rank 0 runs; or another program holds the "
         "port, or rank 0 is stopped or cut off.";
}

}  // namespace

StorePtr rendezvous(InitOptions& o) {
  resolve_rank(o);
  if (auto seconds = detail::env_int("DDP_RENDEZVOUS_TIMEOUT_S", 1, 1 << 24)) {
    o.rendezvous_timeout(std::chrono::seconds(*seconds));
  }
  const std::string& method = o.init_method();
  std::optional<detail::Endpoint> master;
  if (method == "env://") {
    master = detail::master_from_env();
  } else if (method.rfind("tcp://", 0) == 0) {
    master = detail::parse_endpoint(method.substr(6), "init_method tcp://");
  } else if (method.rfind("file://", 0) != 0 || method.size() <= 7) {
    throw InvalidArgument("init_method '" + method +
                          "' is not one of env://, tcp://host:port, file:///path");
  }
  // Each step below bounds itself by the rendezvous timeout, except where
  // a store call blocks with no deadline: the whole runs bounded, with a
  // little grace so that the steps' own errors (who arrived) come first.
  // Read before anything starts: a malformed secret fails at once.
  const std::optional<detail::JobSecret> secret = detail::JobSecret::from_env();
  const auto timeout = o.rendezvous_timeout();
  const auto grace = std::max(std::chrono::milliseconds(1000), timeout / 10);
  auto step = std::make_shared<std::atomic<const char*>>("connecting to the store");
  const InitOptions options = o;
  auto body = [options, master, secret, step, timeout]() -> StorePtr {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (!master) {
      StorePtr store = c10::make_intrusive<c10d::FileStore>(options.init_method().substr(7),
                                                            options.world_size());
      store->setTimeout(timeout);
      *step = "announcing this rank and counting arrivals";
      detail::wait_for_all_ranks(store, options.rank(), options.world_size(), timeout,
                                 "rendezvous");
      return store;
    }
    *step = "resolving the master address";
    detail::resolve_master(*master, options.rank(), options.world_size(), deadline);
    *step = "connecting to the store";
    detail::StoreConnection tcp = detail::make_tcp_store(*master, options, deadline);
    *step = "being admitted to the job";
    StorePtr job = detail::admit(tcp.store, tcp.reconnect, options.rank(), options.world_size(),
                                 secret, deadline);
    *step = "announcing this rank and counting arrivals";
    // What the steps before left of the rendezvous timeout.
    const auto left = std::max(std::chrono::milliseconds(1),
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   deadline - std::chrono::steady_clock::now()));
    try {
      detail::wait_for_all_ranks(job, options.rank(), options.world_size(), left, "rendezvous");
    } catch (const TimeoutError& e) {
      throw TimeoutError(e.context(),
                         e.problem() + detail::admission_refusals(tcp.store, options.world_size()),
                         e.remedy());
    }
    return job;
  };
  auto blocked = [&] {
    const bool connected = std::string(step->load()) != "connecting to the store";
    throw TimeoutError(detail::rendezvous_context(o),
                       store_name(method, master) + " did not answer within " +
                           std::to_string((timeout + grace).count()) + " ms (this rank was " +
                           step->load() + ")" +
                           unanswered_store_remedy(master.has_value(), connected));
  };
  return detail::run_bounded<StorePtr>(body, timeout + grace, blocked);
}

}  // namespace ddp
