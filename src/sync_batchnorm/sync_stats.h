// SyncBatchNorm's arithmetic and its two collectives (sync_stats.cpp).
//
// Every collective SyncBatchNorm issues goes through allreduce_batch_stats:
// forward's [sum x (C), sum x^2 (C), count] and backward's
// [sum dy (C), sum dy*(x-mean) (C)], both float64 and summed. A rank may
// contribute zeros to either without changing the result: a rank out of
// inputs under Join replays the model (`contribute` false) so that it
// issues them in the order the training ranks do.
#pragma once

#include <ddp/process_group.h>

#include <ATen/core/Tensor.h>

#include <string>

namespace ddp::detail {

void allreduce_batch_stats(ProcessGroup& group, const at::Tensor& stats);

// The global batch's per-channel statistics, float64 tensors of C.
struct BatchStats {
  at::Tensor mean;
  at::Tensor var;  // biased (divided by count)
  double count = 0;
};

// `input` is (N, C, L); allreduces its sums (or zeros, when not
// `contribute`) over the group. Fewer than two values per channel over all
// ranks is an InvalidArgument naming `layer`.
BatchStats global_batch_stats(ProcessGroup& group, const at::Tensor& input,
                              const std::string& layer, bool contribute);

// The normalization as an autograd Function: y = (x - mean) * invstd * w + b
// on `input` (N, C, L); backward allreduces the two gradient sums over
// `group` when the input needs a gradient (zeros when not `contribute`).
// mean and invstd are float64 constants (their dependence on x is in
// backward's formula).
at::Tensor sync_batch_norm(const at::Tensor& input, const at::Tensor& weight,
                           const at::Tensor& bias, const at::Tensor& mean, const at::Tensor& invstd,
                           double count, ProcessGroupPtr group, bool contribute);

}  // namespace ddp::detail
