#include "collectives/host_identity.h"

#include "base/arrival.h"
#include "base/env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

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
  return allgather_on_store(store, prefix, rank, size, host_identity(), timeout,
                            "learning which ranks share a host",
                            ": they passed the rendezvous, so they chose another backend "
                            "(DDP_BACKEND must be the same on every rank) or failed since; see "
                            "their output.");
}

}  // namespace ddp::detail
