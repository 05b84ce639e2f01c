// Which ranks raised a flag: for set-up steps that may fail on some ranks
// only, so that every rank learns which (DDP's construction, a checkpoint's
// load).
#pragma once

#include <ddp/process_group.h>

#include <string>
#include <vector>

namespace ddp::detail {

// Collective (one allgather of one int64): the ranks whose `mine` is true,
// in rank order, on every rank.
std::vector<int> ranks_flagging(ProcessGroup& group, bool mine);

// "1, 2, 5".
std::string rank_list(const std::vector<int>& ranks);

}  // namespace ddp::detail
