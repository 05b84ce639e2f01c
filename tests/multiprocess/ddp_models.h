// Small models for the DDP equivalence tests, each exercising one path.
#pragma once

#include <torch/torch.h>

namespace ddp::testing {

// An MLP registered in a different order (b, c, a) than it is used
// (a, b, c): reverse parameters() order is not the gradient order, so the
// first-iteration bucket rebuild has something to fix.
struct ShuffledMlpImpl : torch::nn::Module {
  torch::nn::Linear b{nullptr}, c{nullptr}, a{nullptr};
  explicit ShuffledMlpImpl(int64_t in = 8, int64_t hidden = 16, int64_t out = 4) {
    b = register_module("b", torch::nn::Linear(hidden, hidden));
    c = register_module("c", torch::nn::Linear(hidden, out));
    a = register_module("a", torch::nn::Linear(in, hidden));
  }
  torch::Tensor forward(torch::Tensor x) { return c(torch::tanh(b(torch::tanh(a(x))))); }
};
TORCH_MODULE(ShuffledMlp);

// Two layers of one shape, registered p, q (or q, p when `swapped`): a
// shape check alone cannot tell the two orders apart.
struct TwinLayersImpl : torch::nn::Module {
  torch::nn::Linear p{nullptr}, q{nullptr};
  explicit TwinLayersImpl(bool swapped) {
    if (swapped) q = register_module("q", torch::nn::Linear(16, 16));
    p = register_module("p", torch::nn::Linear(16, 16));
    if (!swapped) q = register_module("q", torch::nn::Linear(16, 16));
  }
  torch::Tensor forward(torch::Tensor x) { return q(torch::tanh(p(x))); }
};
TORCH_MODULE(TwinLayers);

// A trunk, three branches and a head; forward(x, k) takes branch k only,
// or all of them summed when k < 0.
struct BranchyImpl : torch::nn::Module {
  torch::nn::Linear trunk{nullptr}, head{nullptr};
  torch::nn::ModuleList branches;
  BranchyImpl() {
    trunk = register_module("trunk", torch::nn::Linear(8, 16));
    branches = register_module("branches", torch::nn::ModuleList());
    for (int k = 0; k < 3; ++k) branches->push_back(torch::nn::Linear(16, 16));
    head = register_module("head", torch::nn::Linear(16, 4));
  }
  torch::Tensor forward(torch::Tensor x, int64_t k) {
    auto h = torch::tanh(trunk(x));
    torch::Tensor mid;
    if (k >= 0) {
      mid = branches[k]->as<torch::nn::Linear>()->forward(h);
    } else {
      mid = torch::zeros_like(h);
      for (const auto& branch : *branches) mid = mid + branch->as<torch::nn::Linear>()->forward(h);
    }
    return head(torch::tanh(mid));
  }
};
TORCH_MODULE(Branchy);

// Residual blocks that a forward may skip (stochastic depth): bit k of
// `drop` skips block k, whose parameters then get no gradient.
struct StochasticDepthImpl : torch::nn::Module {
  static constexpr int kBlocks = 4;
  torch::nn::Linear in{nullptr}, out{nullptr};
  torch::nn::ModuleList blocks;
  StochasticDepthImpl() {
    in = register_module("in", torch::nn::Linear(8, 16));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int k = 0; k < kBlocks; ++k) blocks->push_back(torch::nn::Linear(16, 16));
    out = register_module("out", torch::nn::Linear(16, 4));
  }
  torch::Tensor forward(torch::Tensor x, int64_t drop) {
    auto h = torch::tanh(in(x));
    for (int k = 0; k < kBlocks; ++k) {
      if (!(drop >> k & 1)) h = h + torch::tanh(blocks[k]->as<torch::nn::Linear>()->forward(h));
    }
    return out(h);
  }
};
TORCH_MODULE(StochasticDepth);

// Reentrant activation checkpointing of tanh(linear(x)): forward runs
// without a graph; backward recomputes and runs a nested backward through
// it, so the linear's parameters receive their gradients inside that nested
// pass. (The module is passed by address: it outlives the graph.)
struct CheckpointedTanhLinear : torch::autograd::Function<CheckpointedTanhLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               torch::nn::LinearImpl* linear) {
    ctx->save_for_backward({x});
    ctx->saved_data["linear"] = reinterpret_cast<int64_t>(linear);
    torch::NoGradGuard no_grad;
    return torch::tanh(linear->forward(x));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    auto* linear = reinterpret_cast<torch::nn::LinearImpl*>(ctx->saved_data["linear"].toInt());
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor y;
    {
      torch::AutoGradMode enable(true);
      y = torch::tanh(linear->forward(x));
    }
    torch::autograd::backward({y}, {grad[0]});
    return {x.grad(), torch::Tensor()};
  }
};

// One Linear used twice: directly, and again inside a checkpointed block, so
// its gradient arrives twice in one backward (needs static_graph).
struct SharedCheckpointedImpl : torch::nn::Module {
  torch::nn::Linear shared{nullptr}, head{nullptr};
  bool checkpoint = true;
  SharedCheckpointedImpl() {
    shared = register_module("shared", torch::nn::Linear(8, 8));
    head = register_module("head", torch::nn::Linear(8, 4));
  }
  torch::Tensor forward(torch::Tensor x) {
    auto h = torch::tanh(shared(x));
    h = checkpoint ? CheckpointedTanhLinear::apply(h, shared.get()) : torch::tanh(shared(h));
    return head(h);
  }
};
TORCH_MODULE(SharedCheckpointed);

// Linear, BatchNorm, Linear; remembers the running mean it started each
// forward with.
struct BnNetImpl : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
  torch::Tensor mean_at_entry;
  BnNetImpl() {
    // No bias before BatchNorm: its gradient is zero up to rounding, which
    // Adam would amplify into noise.
    fc1 = register_module("fc1", torch::nn::Linear(torch::nn::LinearOptions(8, 16).bias(false)));
    bn = register_module("bn", torch::nn::BatchNorm1d(16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
  }
  torch::Tensor forward(torch::Tensor x) {
    mean_at_entry = bn->running_mean.clone();
    return fc2(torch::tanh(bn(fc1(x))));
  }
};
TORCH_MODULE(BnNet);

}  // namespace ddp::testing
