#include "collectives/hierarchical/topology.h"

#include <map>

namespace ddp::detail {

Topology topology_of(const std::vector<std::string>& host_of_rank, int rank) {
  std::map<std::string, int> index_of_host;  // in order of each host's lowest rank
  std::vector<std::vector<int>> ranks_of_host;
  for (int r = 0; r < static_cast<int>(host_of_rank.size()); ++r) {
    auto [it, fresh] =
        index_of_host.emplace(host_of_rank[r], static_cast<int>(ranks_of_host.size()));
    if (fresh) ranks_of_host.emplace_back();
    ranks_of_host[it->second].push_back(r);
  }
  Topology t;
  t.host_index = index_of_host.at(host_of_rank[rank]);
  t.host_count = static_cast<int>(ranks_of_host.size());
  t.host_ranks = ranks_of_host[t.host_index];
  t.local_size = static_cast<int>(t.host_ranks.size());
  for (int r : t.host_ranks) t.local_rank += r < rank;
  for (const auto& ranks : ranks_of_host) {
    t.uniform = t.uniform && static_cast<int>(ranks.size()) == t.local_size;
    t.leaders.push_back(ranks.front());
  }
  if (t.uniform) {
    for (const auto& ranks : ranks_of_host) t.peers.push_back(ranks[t.local_rank]);
  }
  return t;
}

}  // namespace ddp::detail
