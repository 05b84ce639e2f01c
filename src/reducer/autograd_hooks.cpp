#include "reducer/autograd_hooks.h"

#include "compat/torch_compat.h"

#include <ddp/errors.h>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace ddp::detail {
namespace {

class LambdaPreHook : public torch::autograd::FunctionPreHook {
 public:
  explicit LambdaPreHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    fn_();
    return grads;
  }

 private:
  std::function<void()> fn_;
};

// A leaf that requires grad: the only tensors with a gradient accumulator.
const at::Tensor& leaf_requiring_grad(const at::Tensor& param) {
  if (!param.defined() || !param.requires_grad() || !param.is_leaf()) {
    throw InvalidArgument(
        ErrorContext{-1, 0, "", "GradReadyHook", {}},
        "the tensor must be a leaf that requires grad (a module's "
        "parameter); got " +
            std::string(!param.defined()         ? "an undefined tensor"
                        : !param.requires_grad() ? "one that does not require grad"
                                                 : "a non-leaf (the result of an operation)"));
  }
  return param;
}

}  // namespace
}  // namespace ddp::detail

namespace ddp {

GradReadyHook::GradReadyHook(const at::Tensor& param, std::function<void()> on_ready)
    : accumulator_(compat::grad_accumulator(detail::leaf_requiring_grad(param))) {
  key_ = accumulator_->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
      [on_ready = std::move(on_ready)](const torch::autograd::variable_list& outputs,
                                       const torch::autograd::variable_list&) {
        on_ready();
        return outputs;
      }));
}

GradReadyHook::~GradReadyHook() { accumulator_->del_post_hook(key_); }

}  // namespace ddp

namespace ddp::detail {

void at_end_of_backward(std::function<void()> callback) {
  torch::autograd::Engine::get_default_engine().queue_callback(std::move(callback));
}

void at_backward_start(const at::Tensor& output, std::function<void()> callback) {
  if (const auto& fn = output.grad_fn()) {
    fn->add_pre_hook(std::make_unique<LambdaPreHook>(std::move(callback)));
  }
}

std::unordered_set<const torch::autograd::Node*> reachable_nodes(
    const std::vector<at::Tensor>& outputs) {
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack;
  for (const auto& out : outputs) {
    if (!out.defined()) continue;
    // A leaf output that requires grad reaches its own accumulator.
    auto node = out.grad_fn()
                    ? out.grad_fn()
                    : (out.requires_grad() ? torch::autograd::impl::try_get_grad_accumulator(out)
                                           : nullptr);
    if (node && seen.insert(node.get()).second) stack.push_back(node.get());
  }
  while (!stack.empty()) {
    auto* node = stack.back();
    stack.pop_back();
    for (const auto& edge : node->next_edges()) {
      auto* next = edge.function.get();
      if (next && seen.insert(next).second) stack.push_back(next);
    }
  }
  return seen;
}

}  // namespace ddp::detail
