#include "collectives/flagged_ranks.h"

#include <ATen/ATen.h>

namespace ddp::detail {

std::vector<int> ranks_flagging(ProcessGroup& group, bool mine) {
  std::vector<at::Tensor> all;
  for (int r = 0; r < group.size(); ++r) all.push_back(at::empty({1}, at::kLong));
  group.allgather(all, at::tensor({static_cast<int64_t>(mine)}, at::kLong))->wait();
  std::vector<int> flagged;
  for (int r = 0; r < group.size(); ++r) {
    if (all[r].item<int64_t>() != 0) flagged.push_back(r);
  }
  return flagged;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace ddp::detail
