// Rendezvous (env://, tcp://, file://) on libtorch's c10d stores, and the
// default process group.
#include <ddp/init.h>
#include <ddp/mutex.h>

#include <ddp/backends/round_robin.h>
#include <ddp/errors.h>

#include "collectives/checked_process_group.h"
#include "rendezvous/admission.h"
#include "rendezvous/arrival.h"
#include "rendezvous/bounded.h"
#include "rendezvous/store_handshake.h"
#include "rendezvous/env.h"
#include "rendezvous/slurm.h"
#include "compat/torch_compat.h"
#include "flight/recorder.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <netdb.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <optional>
#include <thread>

namespace ddp {
namespace {

Mutex default_mutex;
ProcessGroupPtr default_group DDP_GUARDED_BY(default_mutex);

constexpr long kMaxRanks = 1 << 20;
// Counts, per rank, the groups built on a store (new_process_group).
const std::string kGroupsBuiltKey = "ddp_groups_built/rank";

struct Endpoint {
  std::string host;
  int port = -1;
  std::string source;  // where the host came from, for errors ("MASTER_ADDR")
};

// The context of this rank's errors while it meets the others.
ErrorContext rendezvous_context(const InitOptions& o) {
  return ErrorContext{o.rank(), o.world_size(), "", "rendezvous", {}};
}

// "host:port" (the host may be [v6]); `what` names the source in errors.
Endpoint parse_endpoint(const std::string& text, const std::string& what) {
  auto colon = text.rfind(':');
  std::string expected = what + "='" + text + "' is not of the form host:port (port 1-65535)";
  if (colon == std::string::npos || colon == 0) throw InvalidArgument(expected);
  Endpoint e{text.substr(0, colon), -1, what};
  if (e.host.size() > 2 && e.host.front() == '[' && e.host.back() == ']') {
    e.host = e.host.substr(1, e.host.size() - 2);
  }
  try {
    size_t used = 0;
    e.port = std::stoi(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1 || e.port < 1 || e.port > 65535) throw 0;
  } catch (...) {
    throw InvalidArgument(expected);
  }
  return e;
}

// MASTER_ADDR and MASTER_PORT; under srun, what the user leaves unset is
// derived from the step (rendezvous/slurm.h).
Endpoint master_from_env() {
  const LaunchInfo info = launch_info_from_env();
  const bool srun = info.source == "slurm";
  if (info.master_addr.empty()) {
    throw InvalidArgument(
        ErrorContext{-1, 0, "", "init_process_group(env://)", {}},
        "MASTER_ADDR is not set; expected the host name or address of rank 0, e.g. "
        "MASTER_ADDR=10.0.0.1 (ddprun and torchrun set it)");
  }
  if (info.master_port < 0) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "init_process_group(env://)", {}},
                          "MASTER_PORT is not set; expected a free TCP port on rank 0's host, e.g. "
                          "MASTER_PORT=29500 (ddprun and torchrun set it)");
  }
  const bool addr_given = detail::env_string("MASTER_ADDR").has_value();
  return {info.master_addr, info.master_port,
          addr_given || !srun ? "MASTER_ADDR" : detail::slurm_master_from_env().addr_source};
}

// Resolves the master's host name first, so that a name that does not
// resolve is reported as such at once (TCPStore would retry it until the
// rendezvous timeout and then blame the connection). A temporary resolver
// failure is retried until `deadline`.
void resolve_master(const Endpoint& master, int rank, int world_size,
                    std::chrono::steady_clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  for (;;) {
    addrinfo* found = nullptr;
    const int rc = getaddrinfo(master.host.c_str(), nullptr, &hints, &found);
    if (found) freeaddrinfo(found);
    if (rc == 0) return;
    const bool temporary = rc == EAI_AGAIN;
    if (!temporary || std::chrono::steady_clock::now() >= deadline) {
      throw CommunicationError(ErrorContext{rank, world_size, "", "", {}},
                               master.source + "='" + master.host +
                                   "' does not resolve to an address: " + gai_strerror(rc) +
                                   (temporary ? " (until the rendezvous timeout)" : "") +
                                   ". Set it to rank 0's host name or IP address.");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// torchrun of PyTorch 2.x hosts the store in its agent and says so with
// TORCHELASTIC_USE_AGENT_STORE=True: every rank is then a client. The agent's
// store outlives the ranks it restarts and the groups a process makes, so the
// keys go under a prefix per restart (TORCHELASTIC_RESTART_COUNT) and per
// rendezvous of this process (every rank makes them in the same order).
bool agent_hosts_store() {
  return detail::env_string("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
}

std::string agent_store_prefix() {
  static std::atomic<int> rendezvous_in_process{0};
  const long restart = detail::env_int("TORCHELASTIC_RESTART_COUNT", 0, 1L << 30).value_or(0);
  return "ddp/attempt_" + std::to_string(restart) + "/rendezvous_" +
         std::to_string(rendezvous_in_process++);
}

// A connection to the rendezvous store, and how to open another one to it
// (rank 0's admission thread has its own).
struct StoreConnection {
  StorePtr store;
  std::function<StorePtr()> reconnect;
};

StoreConnection make_tcp_store(const Endpoint& master, const InitOptions& o,
                               std::chrono::steady_clock::time_point deadline) {
  const bool agent = master.source == "MASTER_ADDR" && agent_hosts_store();
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(master.port);
  opts.isServer = o.rank() == 0 && !agent;
  opts.numWorkers = o.world_size();
  opts.waitWorkers = false;  // detail::wait_for_all_ranks counts arrivals
  opts.timeout = o.rendezvous_timeout();
  compat::use_classic_tcp_store(opts);
  const std::string where = master.host + ":" + std::to_string(master.port);
  try {
    StorePtr store;
    if (opts.isServer) {
      store = c10::make_intrusive<c10d::TCPStore>(master.host, opts);
    } else {
      // Told apart within seconds: a store not up yet, and a port whose
      // program accepts and never answers (store_handshake.h).
      const std::string who = (agent ? "torchrun's store at " : "the rendezvous store at ") + where;
      detail::wait_until_listening(master.host, master.port, rendezvous_context(o), who, deadline);
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      store = detail::handshake(
          [host = master.host, opts] { return c10::make_intrusive<c10d::TCPStore>(host, opts); },
          rendezvous_context(o), who,
          std::clamp(left, std::chrono::milliseconds(1000), detail::kStoreHandshake));
    }
    const std::string prefix = agent ? agent_store_prefix() : "";
    auto client = opts;
    client.isServer = false;
    auto within_prefix = [prefix](StorePtr s) -> StorePtr {
      if (prefix.empty()) return s;
      return c10::make_intrusive<c10d::PrefixStore>(prefix, std::move(s));
    };
    return {within_prefix(store), [host = master.host, client, within_prefix] {
              return within_prefix(c10::make_intrusive<c10d::TCPStore>(host, client));
            }};
  } catch (const Error&) {
    throw;  // ours already say where and what to check
  } catch (const std::exception& e) {
    if (agent) {
      throw CommunicationError(rendezvous_context(o),
                               "cannot reach torchrun's store at " + where + " within " +
                                   std::to_string(o.rendezvous_timeout().count()) +
                                   " ms: " + e.what() + ". Check that torchrun's agent runs.");
    }
    if (o.rank() == 0) {
      const bool in_use = std::string(e.what()).find("in use") != std::string::npos;
      throw CommunicationError(rendezvous_context(o),
                               "cannot host the rendezvous store at " + where + ": " + e.what() +
                                   (in_use ? ". The port is in use: choose another MASTER_PORT."
                                           : ". Check that " + master.source +
                                                 " names this host (rank 0 hosts "
                                                 "the store)."));
    }
    throw CommunicationError(rendezvous_context(o),
                             "cannot reach the rendezvous store at " + where + " within " +
                                 std::to_string(o.rendezvous_timeout().count()) +
                                 " ms: " + e.what() +
                                 ". Check MASTER_ADDR/MASTER_PORT and that rank 0 runs.");
  }
}

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

}  // namespace

LaunchInfo launch_info_from_env() {
  LaunchInfo info;
  struct Source {
    const char *name, *rank, *size, *local_rank, *local_size;
  };
  const Source sources[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
  };
  for (const auto& s : sources) {
    auto rank = detail::env_int(s.rank, 0, kMaxRanks);
    if (!rank) continue;
    auto size = detail::env_int(s.size, 1, kMaxRanks);
    if (!size) {
      throw InvalidArgument(std::string(s.rank) + " is set but " + s.size +
                            " is not; expected the number of ranks, e.g. " + s.size + "=2");
    }
    if (*rank >= *size) {
      throw InvalidArgument(std::string(s.rank) + "=" + std::to_string(*rank) + " is outside [0, " +
                            s.size + "=" + std::to_string(*size) + ")");
    }
    info.rank = static_cast<int>(*rank);
    info.world_size = static_cast<int>(*size);
    info.local_rank = static_cast<int>(detail::env_int(s.local_rank, 0, kMaxRanks).value_or(0));
    if (s.local_size) {
      info.local_world_size =
          static_cast<int>(detail::env_int(s.local_size, 1, kMaxRanks).value_or(1));
    }
    info.source = s.name;
    break;
  }
  info.master_addr = detail::env_string("MASTER_ADDR").value_or("");
  info.master_port = static_cast<int>(detail::env_int("MASTER_PORT", 1, 65535).value_or(-1));
  if (info.source == "slurm" && (info.master_addr.empty() || info.master_port < 0)) {
    const detail::SlurmMaster slurm = detail::slurm_master_from_env();
    if (info.master_addr.empty()) info.master_addr = slurm.addr;
    if (info.master_port < 0) info.master_port = slurm.port;
  }
  return info;
}

StorePtr rendezvous(InitOptions& o) {
  resolve_rank(o);
  if (auto seconds = detail::env_int("DDP_RENDEZVOUS_TIMEOUT_S", 1, 1 << 24)) {
    o.rendezvous_timeout(std::chrono::seconds(*seconds));
  }
  const std::string& method = o.init_method();
  std::optional<Endpoint> master;
  if (method == "env://") {
    master = master_from_env();
  } else if (method.rfind("tcp://", 0) == 0) {
    master = parse_endpoint(method.substr(6), "init_method tcp://");
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
    resolve_master(*master, options.rank(), options.world_size(), deadline);
    *step = "connecting to the store";
    StoreConnection tcp = make_tcp_store(*master, options, deadline);
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
    const std::string where =
        master ? "the rendezvous store at " + master->host + ":" + std::to_string(master->port)
               : "the file store " + method.substr(7);
    const bool connected = std::string(step->load()) != "connecting to the store";
    throw TimeoutError(
        rendezvous_context(o),
        where + " did not answer within " + std::to_string((timeout + grace).count()) +
            " ms (this rank was " + step->load() + ")" +
            (!master
                 ? std::string(": the file system does not answer.")
                 : std::string(connected ? ": the connection was accepted, so a process listens "
                                           "there, but it does not answer as rank 0's store would"
                                         : "") +
                       (connected ? ". Another program may hold MASTER_PORT (choose another), or "
                                    "rank 0 is stopped or cut off."
                                  : ". Check MASTER_ADDR/MASTER_PORT and that rank 0 runs; or "
                                    "another program holds the port, or rank 0 is stopped or "
                                    "cut off.")));
  };
  return detail::run_bounded<StorePtr>(body, timeout + grace, blocked);
}

std::string rendezvous_master_host(const InitOptions& o) {
  const std::string& method = o.init_method();
  if (method == "env://") return launch_info_from_env().master_addr;
  if (method.rfind("tcp://", 0) == 0) {
    return parse_endpoint(method.substr(6), "init_method tcp://").host;
  }
  return "";
}

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
  setup.master_host = rendezvous_master_host(options);
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
    group->record_flights(store ? generation : "storeless" + std::to_string(++storeless_groups));
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
