#include "collectives/hierarchical/topology.h"

#include <map>

namespace ddp::detail {

Topology topology_of(const std::vector<std::string>& host_of_rank, int rank) {
  std::map<std::string, int> index_of_host;  // in order of each host's lowest rank
  std::vector<int> ranks_on_host;
  std::vector<int> host_of;
  for (const auto& label : host_of_rank) {
    auto [it, fresh] = index_of_host.emplace(label, static_cast<int>(ranks_on_host.size()));
    if (fresh) ranks_on_host.push_back(0);
    host_of.push_back(it->second);
    ++ranks_on_host[it->second];
  }
  Topology t;
  t.host_index = host_of[rank];
  t.host_count = static_cast<int>(ranks_on_host.size());
  t.local_size = ranks_on_host[t.host_index];
  for (int r = 0; r < rank; ++r) t.local_rank += host_of[r] == t.host_index;
  for (int n : ranks_on_host) t.uniform = t.uniform && n == t.local_size;
  return t;
}

}  // namespace ddp::detail
