// The rendezvous store on libtorch's TCPStore: rank 0 hosts it (or
// torchrun's agent does, TORCHELASTIC_USE_AGENT_STORE=True), the others
// connect once it answers.
#pragma once

#include <ddp/init.h>
#include <ddp/store.h>

#include "rendezvous/master.h"

#include <chrono>
#include <functional>

namespace ddp::detail {

// A connection to the rendezvous store, and how to open another one to it
// (rank 0's admission thread has its own).
struct StoreConnection {
  StorePtr store;
  std::function<StorePtr()> reconnect;
};

// Hosts the store on rank 0 (or connects to the agent's), or connects to
// it, by `deadline`: CommunicationError naming the endpoint and what to
// check when it cannot.
StoreConnection make_tcp_store(const Endpoint& master, const InitOptions& o,
                               std::chrono::steady_clock::time_point deadline);

}  // namespace ddp::detail
