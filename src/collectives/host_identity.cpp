#include "collectives/host_identity.h"

#include <ddp/errors.h>

#include "rendezvous/env.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

namespace ddp::detail {
namespace {

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string link_target(const char* path) {
  char buffer[256];
  ssize_t n = readlink(path, buffer, sizeof(buffer) - 1);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
}

}  // namespace

std::string host_identity() {
  if (auto id = env_string("DDP_HOST_ID")) return "id:" + *id;
  struct stat shm {};
  std::string shm_device = stat("/dev/shm", &shm) == 0 ? std::to_string(shm.st_dev) : "none";
  return first_line("/proc/sys/kernel/random/boot_id") + "/" + shm_device + "/" +
         link_target("/proc/self/ns/net");
}

std::vector<std::string> hosts_of_ranks(const StorePtr& store, const std::string& prefix, int rank,
                                        int size, std::chrono::milliseconds timeout) {
  const std::string mine = host_identity();
  store->set(prefix + std::to_string(rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::vector<std::string> hosts(size);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (int r = 0; r < size; ++r) {
    const std::string key = prefix + std::to_string(r);
    while (!store->check({key})) {
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string missing;
        int arrived = 0;
        for (int m = 0; m < size; ++m) {
          if (store->check({prefix + std::to_string(m)})) {
            ++arrived;
          } else {
            missing += (missing.empty() ? "" : ", ") + std::to_string(m);
          }
        }
        throw TimeoutError("ddp: rank " + std::to_string(rank) +
                           ": learning which ranks share a host timed out after " +
                           std::to_string(timeout.count()) + " ms: " + std::to_string(arrived) +
                           " of " + std::to_string(size) + " ranks arrived (missing: " + missing +
                           "): they passed the rendezvous, so they chose another "
                           "backend (DDP_BACKEND must be the same on every rank) or failed "
                           "since; see their output.");
      }
      std::this_thread::sleep_for(pause);  // backing off: N ranks poll one store
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
    auto bytes = store->get(key);
    hosts[r].assign(bytes.begin(), bytes.end());
  }
  return hosts;
}

}  // namespace ddp::detail
