// skip_all_reduce_unused_params under DDP_DEBUG=detail: every rank must
// leave out the same parameters, or their buckets' allreduces would differ.
#pragma once

#include <ddp/process_group.h>

#include <string>
#include <vector>

namespace ddp::detail {

// Collective, before any bucket is sent: one allreduce (SUM) of an int32 per
// parameter, the ranks that leave it out. InvalidArgument on every rank
// naming the first parameter that some ranks leave out and others send,
// and how many do each.
void check_same_unused(ProcessGroup& group, const std::vector<bool>& left_out,
                       const std::vector<std::string>& names);

}  // namespace ddp::detail
