// Which ranks share a host: the shared-memory backend needs it, and the
// hierarchical and auto backends group ranks by it.
#pragma once

#include <ddp/store.h>

#include <chrono>
#include <string>
#include <vector>

namespace ddp::detail {

// This process's host, as a label equal for processes that can share
// memory through /dev/shm and talk without a network: $DDP_HOST_ID when set
// (to split or join hosts by hand); else the kernel's boot id, the device
// of /dev/shm and the network namespace. Processes in different network
// namespaces count as different hosts, as containers are: that is what a
// multi-host test in namespaces means, and it is only slower, never wrong.
std::string host_identity();

// Every rank's host_identity(), exchanged through `store` under `prefix`;
// TimeoutError naming the missing ranks after `timeout`.
std::vector<std::string> hosts_of_ranks(const StorePtr& store, const std::string& prefix, int rank,
                                        int size, std::chrono::milliseconds timeout);

}  // namespace ddp::detail
