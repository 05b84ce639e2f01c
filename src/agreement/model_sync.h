// Model state across ranks: checking that every rank holds the same
// parameters, and broadcasting tensors from one rank, coalesced by dtype.
#pragma once

#include <ddp/process_group.h>

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace ddp::detail {

// Every rank's `mine` (of one dtype and size on every rank), in rank order:
// one allgather, waited for (the group's timeout).
std::vector<at::Tensor> allgather(ProcessGroup& group, const at::Tensor& mine);

// Every rank calls it with its tensors; InvalidArgument on every rank when
// the count, or any tensor's name (a hash), dtype or shape, differs, naming
// the first differing tensor (index i), what each rank has there (name
// included), and `what` ("parameters"). Two collectives (a third on the
// error path, for the names), bounded by the group's timeout.
void verify_same_tensors(ProcessGroup& group, const std::vector<at::Tensor>& tensors,
                         const std::vector<std::string>& names, const std::string& what);

// After verify_same_tensors: InvalidArgument on every rank unless every
// tensor's bytes equal rank 0's (a 64-bit hash of each, one allgather),
// naming the first tensor that differs (index and name) and the ranks whose
// value differs from rank 0's (the error's peers).
void verify_same_values(ProcessGroup& group, const std::vector<at::Tensor>& tensors,
                        const std::vector<std::string>& names, const std::string& what);

// Set-up checks that may fail on some ranks only, ahead of collectives
// that every rank must reach: each rank runs its `checks`, then the ranks
// learn who failed (ranks_flagging). A rank whose checks threw rethrows
// that, even if the collective fails; the others raise InvalidArgument
// naming those ranks (`what`: what they were building), so that none waits
// for a rank that stopped. Bounded by the group's timeout.
void check_on_every_rank(ProcessGroup& group, const std::string& what,
                         const std::function<void()>& checks);

// Overwrites `tensors` on every rank with `root`'s, one broadcast per dtype
// (the tensors flattened into one buffer). Without autograd recording.
void broadcast_coalesced(ProcessGroup& group, const std::vector<at::Tensor>& tensors, int root = 0);

}  // namespace ddp::detail
