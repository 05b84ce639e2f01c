#include "rendezvous/master.h"

#include "base/env.h"
#include "rendezvous/slurm.h"

#include <netdb.h>

#include <thread>

namespace ddp::detail {

ErrorContext rendezvous_context(const InitOptions& o) {
  return ErrorContext{o.rank(), o.world_size(), "", "rendezvous", {}};
}

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
  const bool addr_given = env_string("MASTER_ADDR").has_value();
  return {info.master_addr, info.master_port,
          addr_given || !srun ? "MASTER_ADDR" : slurm_master_from_env().addr_source};
}

std::string master_host(const InitOptions& o) {
  const std::string& method = o.init_method();
  if (method == "env://") return launch_info_from_env().master_addr;
  if (method.rfind("tcp://", 0) == 0) {
    return parse_endpoint(method.substr(6), "init_method tcp://").host;
  }
  return "";
}

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

}  // namespace ddp::detail
