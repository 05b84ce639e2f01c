// Model state across ranks: checking that every rank holds the same
// parameters, and broadcasting tensors from one rank, coalesced by dtype.
#pragma once

#include <ddp/process_group.h>

#include <ATen/core/Tensor.h>

#include <exception>
#include <string>
#include <vector>

namespace ddp::detail {

// Every rank calls it with its tensors; InvalidArgument on every rank when
// the count, or any tensor's name (a hash), dtype or shape, differs, naming
// the first differing tensor (index i), what each rank has there (name
// included), and `what` ("parameters"). Two collectives (a third on the
// error path, for the names), bounded by the group's timeout.
void verify_same_tensors(ProcessGroup& group, const std::vector<at::Tensor>& tensors,
                         const std::vector<std::string>& names, const std::string& what);

// Set-up checks that may fail on some ranks only, ahead of collectives
// that every rank must reach: each rank passes what its own checks threw
// (null: nothing) and the ranks allgather who failed. A rank that failed
// rethrows its error; the others raise InvalidArgument naming those ranks
// (`what`: what they were building), so that none waits for a rank that
// stopped. One small collective, bounded by the group's timeout; a rank
// that failed raises its own error even if that collective fails.
void raise_on_every_rank(ProcessGroup& group, std::exception_ptr mine, const std::string& what);

// Overwrites `tensors` on every rank with `root`'s, one broadcast per dtype
// (the tensors flattened into one buffer). Without autograd recording.
void broadcast_coalesced(ProcessGroup& group, const std::vector<at::Tensor>& tensors, int root = 0);

}  // namespace ddp::detail
