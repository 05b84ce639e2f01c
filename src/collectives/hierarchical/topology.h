// Which ranks share a host, from one label per rank: the hierarchical
// group's layout, computed the same way on every rank.
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
};

Topology topology_of(const std::vector<std::string>& host_of_rank, int rank);

}  // namespace ddp::detail
