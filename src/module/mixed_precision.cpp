#include "module/mixed_precision.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

namespace ddp::detail {

LowPrecisionParams::LowPrecisionParams(std::vector<at::Tensor> params, at::ScalarType dtype)
    : params_(std::move(params)), full_(params_.size()), low_(params_.size()), dtype_(dtype) {}

bool LowPrecisionParams::lower() {
  at::NoGradGuard no_grad;
  const bool swap = !lowered_;
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
