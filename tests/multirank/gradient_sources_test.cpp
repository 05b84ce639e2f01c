// The contract for gradients that do not come from plain module code
// (docs/ddp.md, "Where gradients come from"), threads as ranks. DDP
// reduces whatever reaches a parameter's gradient accumulator, so each case
// below either gives every rank the average of the ranks' local gradients,
// bit for bit, or raises InvalidArgument on every rank; none is skipped
// silently:
// - a custom autograd Function in the forward: reduced;
// - a tensor hook on a parameter (Tensor::register_hook): what it returns
//   is reduced;
// - a torch::jit::Module inside a torch::nn::Module: reduced when the
//   wrapper registers the script module's parameters as its own; when it
//   does not, DDP sees no parameter and says so;
// - a parameter shared by two DDP modules: one backward through both is
//   reduced by each (the same average, sent twice); a backward through one
//   alone is reported by the other at its next synchronized backward.
#include "spawn.h"
#include "support/raised.h"

#include <ddp/distributed_data_parallel.h>
#include <ddp/errors.h>

#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace ddp::testing {
namespace {

constexpr int kRanks = 2;

torch::Tensor batch(int rank) {
  return torch::sin(torch::arange(12, torch::kDouble).view({3, 4}) * 1.7 + rank);
}

void fill(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  int k = 0;
  for (auto& p : m.parameters()) p.copy_(torch::linspace(-1, 1, p.numel()).view_as(p) * ++k);
}

// y = x w with a hand-written backward.
struct MatMul : torch::autograd::Function<MatMul> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               torch::Tensor w) {
    ctx->save_for_backward({x, w});
    return x.mm(w);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    return {grads[0].mm(saved[1].t()), saved[0].t().mm(grads[0])};
  }
};

struct CustomFunction : torch::nn::Module {
  torch::Tensor w = register_parameter("w", torch::zeros({4, 3}, torch::kDouble));
  torch::Tensor forward(torch::Tensor x) { return MatMul::apply(x, w).tanh(); }
};

// The gradient doubled and shifted by a hook on the parameter.
struct Hooked : torch::nn::Module {
  torch::nn::Linear fc = register_module("fc", torch::nn::Linear(4, 3));
  Hooked() {
    to(torch::kDouble);
    fc->weight.register_hook([](torch::Tensor g) { return g * 2 + 1; });
  }
  torch::Tensor forward(torch::Tensor x) { return fc(x).tanh(); }
};

torch::jit::Module script_module() {
  torch::jit::Module m("Scripted");
  m.register_parameter("w", torch::zeros({4, 3}, torch::kDouble).requires_grad_(), false);
  m.define(R"(
def forward(self, x):
    return torch.tanh(torch.mm(x, self.w))
)");
  return m;
}

// A script module inside a module; `share` registers its parameter.
struct JitWrapped : torch::nn::Module {
  torch::jit::Module scripted = script_module();
  explicit JitWrapped(bool share = true) {
    if (share) register_parameter("w", scripted.attr("w").toTensor());
  }
  torch::Tensor forward(torch::Tensor x) { return scripted.forward({x}).toTensor(); }
};

// Trains one step of `make()` under DDP on every rank and compares each
// parameter's gradient with the average of the ranks' local gradients,
// computed here from a second copy. Returns what differed on each rank.
// `tolerance` 0: bit for bit.
template <typename Net>
std::vector<std::string> expect_average(const std::function<std::shared_ptr<Net>()>& make,
                                        double tolerance = 0) {
  std::vector<std::string> failures(kRanks);
  spawn(kRanks, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, kRanks);
    auto local = make();
    fill(*local);
    std::vector<torch::Tensor> want;
    for (int r = 0; r < kRanks; ++r) {
      for (auto& p : local->parameters()) p.mutable_grad() = torch::Tensor();
      local->forward(batch(r)).sum().backward();
      auto params = local->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        auto share = params[i].grad() / kRanks;
        if (r == 0) {
          want.push_back(share);
        } else {
          want[i] = want[i] + share;
        }
      }
    }
    auto net = make();
    fill(*net);
    DistributedDataParallel model(net, DistributedDataParallelOptions().process_group(pg));
    model->forward(batch(rank)).sum().backward();
    auto params = net->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& got = params[i].grad();
      if (!got.defined() || (tolerance == 0 ? !torch::equal(got, want[i])
                                            : !torch::allclose(got, want[i], tolerance, 0))) {
        failures[rank] = "parameter " + std::to_string(i) + " is not the ranks' average" +
                         (params[i].grad().defined()
                              ? " (off by " +
                                    std::to_string((params[i].grad() - want[i]).abs().max().template item<double>()) +
                                    ")"
                              : " (no gradient)");
      }
    }
  });
  return failures;
}

TEST(GradientSources, ACustomAutogradFunctionIsReduced) {
  for (const auto& f : expect_average<CustomFunction>([] { return std::make_shared<CustomFunction>(); })) {
    EXPECT_EQ(f, "");
  }
}

TEST(GradientSources, WhatATensorHookOnAParameterReturnsIsReduced) {
  for (const auto& f : expect_average<Hooked>([] { return std::make_shared<Hooked>(); })) {
    EXPECT_EQ(f, "");
  }
}

TEST(GradientSources, AScriptModuleWhoseParametersTheWrapperRegistersIsReduced) {
  // Not bit for bit: the script module's first call (the profiling run)
  // and its later ones (an optimized graph) round differently, here too.
  for (const auto& f :
       expect_average<JitWrapped>([] { return std::make_shared<JitWrapped>(); }, 1e-12)) {
    EXPECT_EQ(f, "");
  }
}

TEST(GradientSources, AScriptModuleWhoseParametersAreNotRegisteredIsRefused) {
  std::vector<Raised> results(kRanks);
  spawn(kRanks, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, kRanks);
    results[rank] = raised([&] {
      DistributedDataParallel model(std::make_shared<JitWrapped>(/*share=*/false),
                                    DistributedDataParallelOptions().process_group(pg));
    });
  });
  for (const auto& r : results) {
    EXPECT_TRUE(r) << r;
    EXPECT_TRUE(r.mentions("requires_grad")) << r;
  }
}

// Two heads on one shared trunk, each head its own DDP module holding the
// trunk's weight too.
struct Head : torch::nn::Module {
  torch::Tensor trunk, w;
  explicit Head(torch::Tensor shared) {
    trunk = register_parameter("trunk", shared);
    w = register_parameter("w", torch::linspace(-1, 1, 3, torch::kDouble).view({3, 1}));
  }
  torch::Tensor forward(torch::Tensor x) { return x.mm(trunk).tanh().mm(w); }
};

// On every rank: two DDP heads sharing one trunk, handed to `body`.
void with_two_heads(const std::function<void(int rank, const torch::Tensor& trunk,
                                             DistributedDataParallel& a,
                                             DistributedDataParallel& b)>& body) {
  spawn(kRanks, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, kRanks);
    auto trunk = torch::linspace(-1, 1, 12, torch::kDouble).view({4, 3}).requires_grad_();
    DistributedDataParallel a(std::make_shared<Head>(trunk),
                              DistributedDataParallelOptions().process_group(pg));
    DistributedDataParallel b(std::make_shared<Head>(trunk),
                              DistributedDataParallelOptions().process_group(pg));
    body(rank, trunk, a, b);
  });
}

TEST(GradientSources, ASharedParameterInOneBackwardIsReducedByBoth) {
  std::vector<std::string> failures(kRanks);
  with_two_heads([&](int rank, const torch::Tensor& trunk, DistributedDataParallel& a,
                     DistributedDataParallel& b) {
    (a->forward(batch(rank)).sum() + 2 * b->forward(batch(rank)).sum()).backward();
    // The local sum of both heads' gradients, averaged over the ranks.
    torch::Tensor want;
    for (int r = 0; r < kRanks; ++r) {
      auto t = trunk.detach().clone().requires_grad_();
      Head ha(t), hb(t);
      (ha.forward(batch(r)).sum() + 2 * hb.forward(batch(r)).sum()).backward();
      want = r == 0 ? t.grad() / kRanks : want + t.grad() / kRanks;
    }
    if (!torch::allclose(trunk.grad(), want, 1e-12, 1e-12)) failures[rank] = "trunk";
  });
  for (const auto& f : failures) EXPECT_EQ(f, "");
}

TEST(GradientSources, ASharedParameterInABackwardOfOneAloneIsReportedOnEveryRank) {
  std::vector<Raised> results(kRanks);
  with_two_heads([&](int rank, const torch::Tensor&, DistributedDataParallel& a,
                     DistributedDataParallel& b) {
    a->forward(batch(rank)).sum().backward();  // reaches b's trunk hook: no b forward
    results[rank] = raised([&] { b->forward(batch(rank)).sum().backward(); });
  });
  for (const auto& r : results) {
    EXPECT_TRUE(r) << r;
    EXPECT_TRUE(r.mentions("forward pass #")) << r;
  }
}

}  // namespace
}  // namespace ddp::testing
