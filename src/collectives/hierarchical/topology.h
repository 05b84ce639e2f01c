// Which ranks share a host, from one label per rank: the hierarchical
// group's layout, computed the same way on every rank; and how errors name
// the option that chose each part.
#pragma once

#include <string>
#include <vector>

namespace ddp::detail {

struct Topology {
  int host_index = 0;  // hosts numbered by their lowest rank
  int host_count = 1;
  int local_rank = 0;  // index among the ranks of this host, by rank
  int local_size = 1;
  bool uniform = true;  // every host has local_size ranks
  // The members of this rank's sub-groups, in group-rank order:
  std::vector<int> host_ranks;  // this host's ranks (group rank = local_rank)
  std::vector<int> peers;       // local index local_rank on every host (uniform only;
                                // group rank = host_index)
  std::vector<int> leaders;     // every host's lowest rank (group rank = host_index)
};

Topology topology_of(const std::vector<std::string>& host_of_rank, int rank);

// What names the parts, for errors about them (find_backend's chosen_by).
inline constexpr const char* kLocalBackendChosenBy = "HierarchicalOptions::local_backend";
inline constexpr const char* kCrossBackendChosenBy =
    "HierarchicalOptions::cross_backend or DDP_CROSS_BACKEND";

}  // namespace ddp::detail
