// The collectives of the shm backend, as steps of the Channel protocol
// (docs/backends.md, "## shm"). Each runs on the group's progress thread;
// arguments are validated already. Zero elements take no step (every rank
// skips alike).
#pragma once

#include "collectives/shm/channel.h"

#include <ddp/process_group.h>

#include <ATen/core/Tensor.h>

#include <vector>

namespace ddp::detail::shm {

// Tensors of at most `small_bytes` take the one-synchronisation path; larger
// ones reduce-scatter and all-gather through the slots, chunk by chunk.
// `kind`: ALLREDUCE_COALESCED for the concatenation of a coalesced one
// (described with Channel::describe_tensors first).
void allreduce(Channel& ch, const at::Tensor& tensor, ReduceOp op, int64_t small_bytes,
               OpKind kind = OpKind::ALLREDUCE);
void broadcast(Channel& ch, const at::Tensor& tensor, int root);
void allgather(Channel& ch, const std::vector<at::Tensor>& outputs, const at::Tensor& input);
void reduce_scatter(Channel& ch, const at::Tensor& output, const std::vector<at::Tensor>& inputs,
                    ReduceOp op);
void barrier(Channel& ch);
// AVG: divides `t` by the world size once it holds the sum (SUM otherwise).
void finish_average(const at::Tensor& t, ReduceOp op, int world);

}  // namespace ddp::detail::shm
