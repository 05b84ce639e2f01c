// DistributedDataParallelOptions::mixed_precision's parameters: in their own
// dtype (the values the optimizer steps and checkpoints save) outside
// forward and backward, in param_dtype during them, as PyTorch's DDP
// (_MixedPrecision) keeps them. set_data swaps them, on the same tensors,
// so the wrapped module and the optimizer keep their handles.
#pragma once

#include <ddp/process_group.h>

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace ddp::detail {

class LowPrecisionParams {
 public:
  // `params`: the floating-point ones to cast, each once (those requiring
  // grad or not: all take part in the forward), named by `names` in errors;
  // `dtype`: param_dtype; `group`: for errors' context.
  LowPrecisionParams(std::vector<at::Tensor> params, std::vector<std::string> names,
                     at::ScalarType dtype, ProcessGroupPtr group);

  // Whether the parameters hold their param_dtype copies now.
  bool lowered() const { return lowered_; }

  // Before a forward: each parameter's data becomes a param_dtype copy of
  // its value, and a gradient it holds (accumulated by no_sync passes) is
  // cast too, as in PyTorch. Already lowered (a forward whose backward has
  // not run yet): the copies are refreshed from the kept values. Returns
  // whether the data were swapped (the gradient accumulators changed).
  // InvalidArgument, before any is swapped, if one is not in its own dtype
  // (another module with mixed_precision lowered it: a shared parameter).
  bool lower();
  // After the backward: each parameter's own data back, its gradient cast
  // to its dtype. Returns whether anything was swapped.
  bool restore();

 private:
  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<at::ScalarType> own_;  // each parameter's dtype at construction
  ProcessGroupPtr group_;
  std::vector<at::Tensor> full_;  // each parameter's own data, while lowered
  std::vector<at::Tensor> low_;   // its param_dtype copy, kept between iterations
  at::ScalarType dtype_;
  bool lowered_ = false;
};

}  // namespace ddp::detail
