// GradReadyHook: runs a callback each time a parameter's gradient has been
// accumulated into param.grad(). It is the hook DDP's Reducer puts on every
// parameter (the paper's Algorithm 1, autograd_hook), public for programs
// that reduce gradients their own way (experiments/paper/variants.cpp writes the blog's
// data-parallel variants with it) or act on a parameter as soon as its
// gradient is complete: PyTorch's Tensor.register_post_accumulate_grad_hook,
// which libtorch's C++ API lacks.
//
//   ddp::GradReadyHook hook(param, [&] { work.push_back(group->allreduce(param.grad())); });
//
// Contract
// - `param` is a leaf tensor that requires grad (a module's parameter);
//   anything else is InvalidArgument.
// - `on_ready` runs once per accumulation into param.grad() (once per
//   backward pass, more under reentrant backward or activation
//   checkpointing), on the thread that runs backward for param's device (for
//   CPU tensors, the thread that called backward()), after param.grad()
//   holds the new sum. An exception it throws comes out of backward().
// - The hook keeps the parameter's gradient accumulator alive (the parameter
//   holds it only weakly) and is removed when the object is destroyed: do
//   not destroy it while a backward pass through `param` runs.
// - Not copyable or movable: it owns the registration, which its destructor
//   removes.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace torch::autograd {
struct Node;
}

namespace ddp {

class GradReadyHook {
 public:
  GradReadyHook(const at::Tensor& param, std::function<void()> on_ready);
  ~GradReadyHook();
  GradReadyHook(const GradReadyHook&) = delete;
  GradReadyHook& operator=(const GradReadyHook&) = delete;

  // The gradient accumulator the hook sits on (autograd's node for param).
  const torch::autograd::Node* accumulator() const { return accumulator_.get(); }

 private:
  std::shared_ptr<torch::autograd::Node> accumulator_;
  uintptr_t key_;
};

}  // namespace ddp
