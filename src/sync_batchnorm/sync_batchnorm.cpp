// The SyncBatchNorm module: parameters and buffers as libtorch's BatchNorm
// (same names, so state dicts and converted models line up), its checks,
// and the running statistics; the arithmetic is in sync_stats.cpp.
#include <ddp/sync_batchnorm.h>

#include <ddp/errors.h>
#include <ddp/init.h>

#include "sync_batchnorm/join_shadow.h"
#include "sync_batchnorm/sync_stats.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <sstream>

namespace ddp {

SyncBatchNormImpl::SyncBatchNormImpl(torch::nn::BatchNormOptions options_,
                                     ProcessGroupPtr process_group, int input_dims)
    : SyncBatchNormImpl(std::move(options_), std::move(process_group), input_dims, Adopted{}) {}

SyncBatchNormImpl::SyncBatchNormImpl(torch::nn::BatchNormOptions options_,
                                     ProcessGroupPtr process_group, int input_dims, Adopted adopted)
    : options(std::move(options_)),
      group_(std::move(process_group)),
      input_dims_(input_dims),
      adopted_(std::move(adopted)) {
  if (input_dims_ < 0 || input_dims_ > 3) {
    throw InvalidArgument(
        ErrorContext{-1, 0, "", "SyncBatchNorm", {}},
        "input_dims must be 0 (any), 1, 2 or 3, got " + std::to_string(input_dims_));
  }
  if (options.num_features() <= 0) {
    throw InvalidArgument(
        ErrorContext{-1, 0, "", "SyncBatchNorm", {}},
        "num_features must be positive, got " + std::to_string(options.num_features()));
  }
  reset();
}

void SyncBatchNormImpl::reset() {
  const int64_t c = options.num_features();
  // Adopted tensors are registered as they are (convert_sync_batchnorm);
  // otherwise fresh ones, initialized as BatchNorm does.
  const bool adopt = adopted_.running_mean.defined() || adopted_.weight.defined();
  if (options.affine()) {
    // An adopted parameter keeps its requires_grad (a frozen BatchNorm stays frozen).
    weight = adopt ? register_parameter("weight", adopted_.weight, adopted_.weight.requires_grad())
                   : register_parameter("weight", torch::ones({c}));
    bias = adopt ? register_parameter("bias", adopted_.bias, adopted_.bias.requires_grad())
                 : register_parameter("bias", torch::zeros({c}));
  } else {
    weight = register_parameter("weight", torch::Tensor(), /*requires_grad=*/false);
    bias = register_parameter("bias", torch::Tensor(), /*requires_grad=*/false);
  }
  if (options.track_running_stats()) {
    running_mean =
        register_buffer("running_mean", adopt ? adopted_.running_mean : torch::zeros({c}));
    running_var = register_buffer("running_var", adopt ? adopted_.running_var : torch::ones({c}));
    num_batches_tracked =
        register_buffer("num_batches_tracked",
                        adopt ? adopted_.num_batches_tracked : torch::zeros({}, torch::kLong));
  } else {
    running_mean = register_buffer("running_mean", torch::Tensor());
    running_var = register_buffer("running_var", torch::Tensor());
    num_batches_tracked = register_buffer("num_batches_tracked", torch::Tensor());
  }
  adopted_ = Adopted{};  // clone() and later resets start fresh
}

void SyncBatchNormImpl::reset_running_stats() {
  if (!options.track_running_stats()) return;
  torch::NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void SyncBatchNormImpl::reset_parameters() {
  reset_running_stats();
  if (!options.affine()) return;
  torch::nn::init::ones_(weight);
  torch::nn::init::zeros_(bias);
}

ProcessGroupPtr SyncBatchNormImpl::process_group() const {
  return group_ ? group_ : default_process_group();
}

void SyncBatchNormImpl::check_input(const torch::Tensor& input) const {
  const int64_t d = input.dim();
  const bool ok = input_dims_ == 0   ? d >= 2
                  : input_dims_ == 1 ? (d == 2 || d == 3)
                                     : d == input_dims_ + 2;
  if (!ok) {
    const char* want = input_dims_ == 0   ? "at least 2-D (N, C, ...)"
                       : input_dims_ == 1 ? "2-D or 3-D (N, C[, L])"
                       : input_dims_ == 2 ? "4-D (N, C, H, W)"
                                          : "5-D (N, C, D, H, W)";
    const std::string layer =
        "SyncBatchNorm" + (input_dims_ ? std::to_string(input_dims_) + "d" : std::string());
    throw InvalidArgument(
        ErrorContext{-1, 0, "", layer, {}},
        std::string("expected ") + want + " input, got " + std::to_string(d) + "-D");
  }
  if (input.size(1) != options.num_features()) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "SyncBatchNorm", {}},
                          "input has " + std::to_string(input.size(1)) +
                              " channels (dimension 1) but num_features is " +
                              std::to_string(options.num_features()));
  }
}

torch::Tensor SyncBatchNormImpl::forward(const torch::Tensor& input) {
  check_input(input);
  if (is_training()) return train_forward(input);
  // No collective in evaluation (PyTorch's hangs there: pytorch/pytorch#24397).
  return at::batch_norm(input, weight, bias, running_mean, running_var,
                        /*training=*/!options.track_running_stats(), /*momentum=*/0.0,
                        options.eps(), /*cudnn_enabled=*/false);
}

torch::Tensor SyncBatchNormImpl::train_forward(const torch::Tensor& input) {
  const auto group = process_group();
  const int64_t n = input.size(0);
  const int64_t c = input.size(1);
  int64_t l = 1;
  for (int64_t d = 2; d < input.dim(); ++d) l *= input.size(d);
  // (N, C, L): spatial dimensions flattened; a view when input is contiguous.
  const at::Tensor flat = input.reshape({n, c, l});
  // A rank out of inputs replaying the model for Join adds nothing.
  const bool contribute = !detail::in_join_shadow();
  const auto stats = detail::global_batch_stats(*group, flat, "SyncBatchNorm", contribute);

  if (options.track_running_stats()) {
    torch::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
    const double factor = options.momentum()
                              ? *options.momentum()
                              : 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
    const at::Tensor unbiased = stats.var * (stats.count / (stats.count - 1));
    running_mean.copy_(running_mean.to(at::kDouble) * (1 - factor) + stats.mean * factor);
    running_var.copy_(running_var.to(at::kDouble) * (1 - factor) + unbiased * factor);
  }
  const at::Tensor invstd = (stats.var + options.eps()).rsqrt();
  return detail::sync_batch_norm(flat, weight, bias, stats.mean, invstd, stats.count, group,
                                 contribute)
      .reshape(input.sizes());
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "ddp::SyncBatchNorm" << (input_dims_ ? std::to_string(input_dims_) + "d" : "") << "("
         << options.num_features() << ", eps=" << options.eps() << ", momentum=";
  if (options.momentum()) {
    stream << *options.momentum();
  } else {
    stream << "None";
  }
  stream << ", affine=" << std::boolalpha << options.affine()
         << ", track_running_stats=" << options.track_running_stats() << ")";
}

}  // namespace ddp
