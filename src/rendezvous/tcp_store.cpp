#include "rendezvous/tcp_store.h"

#include <ddp/errors.h>

#include "base/env.h"
#include "compat/torch_compat.h"
#include "rendezvous/store_handshake.h"
#include "rendezvous/store_listener.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <atomic>

namespace ddp::detail {
namespace {

// torchrun of PyTorch 2.x hosts the store in its agent and says so with
// TORCHELASTIC_USE_AGENT_STORE=True: every rank is then a client. The agent's
// store outlives the ranks it restarts and the groups a process makes, so the
// keys go under a prefix per restart (TORCHELASTIC_RESTART_COUNT) and per
// rendezvous of this process (every rank makes them in the same order).
bool agent_hosts_store() {
  return env_string("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
}

std::string agent_store_prefix() {
  static std::atomic<int> rendezvous_in_process{0};
  const long restart = env_int("TORCHELASTIC_RESTART_COUNT", 0, 1L << 30).value_or(0);
  return "ddp/attempt_" + std::to_string(restart) + "/rendezvous_" +
         std::to_string(rendezvous_in_process++);
}

// What rank 0 should check when it cannot host the store.
std::string host_failure_remedy(const std::string& cause, const Endpoint& master) {
  if (cause.find("in use") != std::string::npos) {
    return ". The port is in use: choose another MASTER_PORT.";
  }
  return ". Check that " + master.source + " names this host (rank 0 hosts the store).";
}

// Why the store could not be hosted or reached, and what to check.
CommunicationError store_failure(const std::string& cause, const Endpoint& master,
                                 const InitOptions& o, bool agent) {
  const std::string where = master.host + ":" + std::to_string(master.port);
  const std::string within = " within " + std::to_string(o.rendezvous_timeout().count()) + " ms";
  if (agent) {
    return CommunicationError(rendezvous_context(o), "cannot reach torchrun's store at " + where +
                                                         within + ": " + cause +
                                                         ". Check that torchrun's agent runs.");
  }
  if (o.rank() == 0) {
    return CommunicationError(rendezvous_context(o), "cannot host the rendezvous store at " +
                                                         where + ": " + cause +
                                                         host_failure_remedy(cause, master));
  }
  return CommunicationError(rendezvous_context(o),
                            "cannot reach the rendezvous store at " + where + within + ": " +
                                cause + ". Check MASTER_ADDR/MASTER_PORT and that rank 0 runs.");
}

}  // namespace

StoreConnection make_tcp_store(const Endpoint& master, const InitOptions& o,
                               std::chrono::steady_clock::time_point deadline) {
  const bool agent = master.source == "MASTER_ADDR" && agent_hosts_store();
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(master.port);
  opts.isServer = o.rank() == 0 && !agent;
  opts.numWorkers = o.world_size();
  opts.waitWorkers = false;  // wait_for_all_ranks counts arrivals
  opts.timeout = o.rendezvous_timeout();
  compat::use_classic_tcp_store(opts);
  const std::string where = master.host + ":" + std::to_string(master.port);
  try {
    StorePtr store;
    if (opts.isServer) {
      listen_on_ipv4(opts, master.host);  // no DNS look-up at each accept (store_listener.h)
      store = c10::make_intrusive<c10d::TCPStore>(master.host, opts);
    } else {
      // Told apart within seconds: a store not up yet, and a port whose
      // program accepts and never answers (store_handshake.h).
      const std::string who = (agent ? "torchrun's store at " : "the rendezvous store at ") + where;
      wait_until_listening(master.host, master.port, rendezvous_context(o), who, deadline);
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      store = handshake(
          [host = master.host, opts] { return c10::make_intrusive<c10d::TCPStore>(host, opts); },
          rendezvous_context(o), who,
          std::clamp(left, std::chrono::milliseconds(1000), kStoreHandshake));
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
    throw store_failure(e.what(), master, o, agent);
  }
}

}  // namespace ddp::detail
