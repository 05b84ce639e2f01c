// SyncBatchNorm: batch normalization over the batch of every rank together,
// on CPU (PyTorch's SyncBatchNorm needs CUDA).
//
//   auto net = torch::nn::Sequential(torch::nn::Conv2d(3, 8, 3), torch::nn::BatchNorm2d(8), ...);
//   ddp::convert_sync_batchnorm(net.ptr());   // every BatchNorm{1,2,3}d becomes a SyncBatchNorm
//   ddp::DistributedDataParallel model(net, ddp::DistributedDataParallelOptions()
//                                               .broadcast_buffers(false));
//
// Contract
// - Training forward issues ONE allreduce (float64: per-channel sum, sum of
//   squares, then the element count) and normalizes with the global mean and
//   (biased) variance; running_mean/running_var/num_batches_tracked are
//   updated as BatchNorm would on the concatenated batch (unbiased variance,
//   momentum, or the cumulative average when momentum is nullopt). Every
//   rank therefore ends with the same running statistics.
// - Training backward issues ONE allreduce (float64: per-channel sum of dy and
//   of dy*(x-mean)) and gives each rank the input gradient of the global
//   batch's loss. Parameter gradients stay local (this rank's samples), as
//   in PyTorch: DDP averages them.
// - Ranks may hold different batch sizes, including zero samples; fewer than
//   two values per channel over all ranks is an InvalidArgument on every rank.
// - Every rank of the group must run the layer's forward and backward: a rank
//   whose loss does not depend on the output leaves the others waiting until
//   the group's timeout.
// - Evaluation mode issues no collective: running statistics are used (or,
//   without track_running_stats, this rank's batch statistics, as PyTorch).
// - Statistics are accumulated in float64 whatever the input dtype; the
//   variance is E[x^2] - mean^2, exact enough unless |mean|/std exceeds ~1e6.
// - Collectives go to `process_group` (a subgroup syncs only its ranks),
//   default ddp::default_process_group(), resolved at the first training
//   forward. They are issued from the forward/backward thread; with a DDP
//   comm hook (its collectives come from DDP's communication thread) give
//   SyncBatchNorm a group of its own so that the order is the same on every
//   rank.
// - Join (uneven inputs): give the DDP module a batch to replay,
//   model->set_join_shadow_batch(torch::zeros({0, C, H, W})); a rank out of
//   inputs then runs the model's forward and backward on it in each
//   iteration the others still train, issuing every SyncBatchNorm collective
//   in their order with zeros for its sums (it adds nothing to the
//   statistics, and its running statistics follow the others'). A Join over
//   a model with a SyncBatchNorm and no shadow batch is refused.
#pragma once

#include <ddp/process_group.h>

#include <torch/nn/cloneable.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>

namespace ddp {

class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  // `input_dims`: 1 takes (N, C) or (N, C, L) as BatchNorm1d, 2 takes
  // (N, C, H, W), 3 takes (N, C, D, H, W); 0 takes any input of 2 or more
  // dimensions (PyTorch's SyncBatchNorm).
  explicit SyncBatchNormImpl(torch::nn::BatchNormOptions options,
                             ProcessGroupPtr process_group = nullptr, int input_dims = 0);

  // The tensors of an existing BatchNorm, taken over (not copied) by
  // convert_sync_batchnorm so that optimizers and references keep working.
  struct Adopted {
    torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  };
  SyncBatchNormImpl(torch::nn::BatchNormOptions options, ProcessGroupPtr process_group,
                    int input_dims, Adopted adopted);

  void reset() override;
  void reset_running_stats();
  void reset_parameters();
  torch::Tensor forward(const torch::Tensor& input);
  void pretty_print(std::ostream& stream) const override;

  // The group collectives go to: the one given, else the default group.
  ProcessGroupPtr process_group() const;
  int input_dims() const { return input_dims_; }

  torch::nn::BatchNormOptions options;
  torch::Tensor weight;               // defined when options.affine()
  torch::Tensor bias;                 // defined when options.affine()
  torch::Tensor running_mean;         // defined when options.track_running_stats()
  torch::Tensor running_var;          // defined when options.track_running_stats()
  torch::Tensor num_batches_tracked;  // defined when options.track_running_stats()

 private:
  void check_input(const torch::Tensor& input) const;
  torch::Tensor train_forward(const torch::Tensor& input);

  ProcessGroupPtr group_;  // null: default_process_group()
  int input_dims_;
  Adopted adopted_;  // consumed by the first reset()
};

TORCH_MODULE(SyncBatchNorm);

// SyncBatchNorm checking its input's rank as BatchNorm{1,2,3}d does.
class SyncBatchNorm1d : public SyncBatchNorm {
 public:
  SyncBatchNorm1d(std::nullptr_t) : SyncBatchNorm(nullptr) {}
  explicit SyncBatchNorm1d(torch::nn::BatchNormOptions options, ProcessGroupPtr group = nullptr)
      : SyncBatchNorm(std::move(options), std::move(group), 1) {}
};
class SyncBatchNorm2d : public SyncBatchNorm {
 public:
  SyncBatchNorm2d(std::nullptr_t) : SyncBatchNorm(nullptr) {}
  explicit SyncBatchNorm2d(torch::nn::BatchNormOptions options, ProcessGroupPtr group = nullptr)
      : SyncBatchNorm(std::move(options), std::move(group), 2) {}
};
class SyncBatchNorm3d : public SyncBatchNorm {
 public:
  SyncBatchNorm3d(std::nullptr_t) : SyncBatchNorm(nullptr) {}
  explicit SyncBatchNorm3d(torch::nn::BatchNormOptions options, ProcessGroupPtr group = nullptr)
      : SyncBatchNorm(std::move(options), std::move(group), 3) {}
};

// Replaces every torch::nn::BatchNorm{1,2,3}d in `module`'s tree by a
// SyncBatchNorm with the same options, name, training mode, parameters and
// buffers (the same tensors). Children of Sequential, ModuleList and
// ModuleDict and modules that reach their children by name are replaced in
// place. A BatchNorm still referenced elsewhere after the swap (typically a
// member field `torch::nn::BatchNorm2d bn` that forward() calls) would keep
// running unsynchronized: that is an InvalidArgument naming it (declare the
// field as ddp::SyncBatchNorm2d, or as torch::nn::AnyModule). Returns the
// converted module: `module` itself, or the new SyncBatchNorm when `module` is
// a BatchNorm.
std::shared_ptr<torch::nn::Module> convert_sync_batchnorm(
    const std::shared_ptr<torch::nn::Module>& module, ProcessGroupPtr process_group = nullptr);

}  // namespace ddp
