// The one place that touches libtorch's autograd internals (gradient
// accumulator post hooks, engine callbacks, graph traversal), so that a
// libtorch upgrade is one file's work: autograd_hooks.cpp, which also
// implements the public GradReadyHook (include/ddp/grad_ready_hook.h).
#pragma once

#include <ddp/grad_ready_hook.h>

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <unordered_set>
#include <vector>

namespace torch::autograd {
struct Node;
}

namespace ddp::detail {

// Runs `callback` at the end of the current backward pass, before
// backward() returns; an exception it throws comes out of backward().
// Only valid while a backward pass runs (from a hook).
void at_end_of_backward(std::function<void()> callback);

// Runs `callback` when backward reaches `output`'s grad_fn (the start of
// the backward pass through this output). No-op for leaves.
void at_backward_start(const at::Tensor& output, std::function<void()> callback);

// Every autograd node reachable from the grad_fns of `outputs`.
std::unordered_set<const torch::autograd::Node*> reachable_nodes(
    const std::vector<at::Tensor>& outputs);

}  // namespace ddp::detail
