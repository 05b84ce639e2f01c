// The environment each rank starts with, the same variables torchrun sets:
// MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK, NODE_RANK and GROUP_WORLD_SIZE, on top of ddprun's own
// environment (from which older values of those names are removed first, so
// a rank never sees two definitions). Like torchrun, when several ranks share
// a node and OMP_NUM_THREADS is not set, it is set to 1: otherwise every rank
// runs as many OpenMP/OpenBLAS threads as the node has cores.
#include "rank_environment.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace ddprun {
namespace {

constexpr const char* kNames[] = {
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "NODE_RANK",
    "GROUP_WORLD_SIZE",
    "DDP_RESTART_COUNT",
    "TORCHELASTIC_RESTART_COUNT",
    "DDP_ELASTIC_MIN_WORLD_SIZE",
    "DDP_ELASTIC_MAX_WORLD_SIZE",
};

bool is_set_by_ddprun(const char* entry) {
  for (const char* name : kNames) {
    const std::size_t len = std::strlen(name);
    if (std::strncmp(entry, name, len) == 0 && entry[len] == '=') return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> rank_environment(const char* const* base, const RankIdentity& id) {
  std::vector<std::string> env;
  const char* const flight = "DDP_FLIGHT_RECORDER_DIR=";
  for (const char* const* entry = base; entry != nullptr && *entry != nullptr; ++entry) {
    const bool replaced =
        !id.flight_recorder_dir.empty() && std::strncmp(*entry, flight, std::strlen(flight)) == 0;
    if (!is_set_by_ddprun(*entry) && !replaced) env.emplace_back(*entry);
  }
  const std::pair<const char*, std::string> values[] = {
      {"MASTER_ADDR", id.master_addr},
      {"MASTER_PORT", std::to_string(id.master_port)},
      {"RANK", std::to_string(id.rank)},
      {"WORLD_SIZE", std::to_string(id.world_size)},
      {"LOCAL_RANK", std::to_string(id.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(id.local_world_size)},
      {"GROUP_RANK", std::to_string(id.node_rank)},
      {"NODE_RANK", std::to_string(id.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(id.nnodes)},
      {"DDP_RESTART_COUNT", std::to_string(id.restart_count)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(id.restart_count)},
  };
  for (const auto& [name, value] : values) {
    if (id.joiner && std::strcmp(name, "RANK") == 0) continue;  // a fresh member id
    env.push_back(std::string(name) + "=" + value);
  }
  if (id.elastic_min > 0) {
    env.push_back("DDP_ELASTIC_MIN_WORLD_SIZE=" + std::to_string(id.elastic_min));
    env.push_back("DDP_ELASTIC_MAX_WORLD_SIZE=" + std::to_string(id.elastic_max));
  }
  if (!id.flight_recorder_dir.empty()) env.push_back(flight + id.flight_recorder_dir);
  const bool threads_set = std::any_of(env.begin(), env.end(), [](const std::string& e) {
    return e.rfind("OMP_NUM_THREADS=", 0) == 0;
  });
  if (id.local_world_size > 1 && !threads_set) env.emplace_back("OMP_NUM_THREADS=1");
  return env;
}

}  // namespace ddprun
