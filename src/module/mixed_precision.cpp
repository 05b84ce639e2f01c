#include "module/mixed_precision.h"

#include <ddp/errors.h>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

namespace ddp::detail {

LowPrecisionParams::LowPrecisionParams(std::vector<at::Tensor> params,
                                       std::vector<std::string> names, at::ScalarType dtype,
                                       ProcessGroupPtr group)
    : params_(std::move(params)),
      names_(std::move(names)),
      group_(std::move(group)),
      full_(params_.size()),
      low_(params_.size()),
      dtype_(dtype) {
  for (const auto& p : params_) own_.push_back(p.scalar_type());
}

bool LowPrecisionParams::lower() {
  at::NoGradGuard no_grad;
  c10::InferenceMode normal(false);  // the copies are updated in place later
  const bool swap = !lowered_;
  for (size_t i = 0; swap && i < params_.size(); ++i) {
    if (params_[i].scalar_type() == own_[i]) continue;
    throw InvalidArgument(
        group_->error_context("mixed_precision"),
        "parameter '" + names_[i] + "' holds " + c10::toString(params_[i].scalar_type()) +
            " before this module's forward, not its own " + c10::toString(own_[i]) +
            ": another module with mixed_precision lowered it (a parameter shared between "
            "two DDP modules). Wrap the module that holds both in one DDP, or leave the "
            "parameter to one of them (parameters_to_ignore)");
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    if (swap) full_[i] = p.detach();  // shares the parameter's own storage
    if (!low_[i].defined()) low_[i] = at::empty_like(full_[i], full_[i].options().dtype(dtype_));
    low_[i].copy_(full_[i]);
    if (!swap) continue;
    p.set_data(low_[i]);
    at::Tensor& grad = p.mutable_grad();
    if (grad.defined() && grad.scalar_type() != dtype_) grad = grad.to(dtype_);
  }
  lowered_ = true;
  return swap;
}

bool LowPrecisionParams::restore() {
  if (!lowered_) return false;
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    p.set_data(full_[i]);
    full_[i] = at::Tensor();
    at::Tensor& grad = p.mutable_grad();
    if (grad.defined() && grad.scalar_type() != p.scalar_type()) grad = grad.to(p.scalar_type());
  }
  lowered_ = false;
  return true;
}

}  // namespace ddp::detail
