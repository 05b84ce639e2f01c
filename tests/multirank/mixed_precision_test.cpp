// DistributedDataParallelOptions::mixed_precision, threads as ranks: two
// ranks on different data end each step bit for bit where a hand-written
// mixed-precision loop ends (parameters copied to param_dtype for forward
// and backward, each rank's gradients cast to reduce_dtype, averaged there,
// cast to the parameters' dtype, the optimizer stepping the full-precision
// values). Two ranks, so that the sum's order cannot matter. Also: with a
// communication hook, gradient_as_bucket_view, batched_grad_copy and
// no_sync; the buffers' dtype; the parameters' dtype outside forward and
// backward; misuse.
#include "spawn.h"
#include "support/raised.h"

#include <ddp/distributed_data_parallel.h>
#include <ddp/errors.h>
#include <ddp/hooks.h>
#include <ddp/zero.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace ddp::testing {
namespace {

constexpr int kRanks = 2;
constexpr int kSteps = 3;

struct Mlp : torch::nn::Module {
  torch::nn::Linear a{nullptr}, b{nullptr};
  Mlp() {
    a = register_module("a", torch::nn::Linear(4, 8));
    b = register_module("b", torch::nn::Linear(8, 2));
    torch::NoGradGuard no_grad;
    int k = 0;
    for (auto& p : parameters()) p.copy_(torch::linspace(-1, 1, p.numel()).view_as(p) * (++k / 3.0));
  }
  torch::Tensor forward(torch::Tensor x) { return b(torch::relu(a(x))); }
};

// Rank r's batch at `step` (no shared generator: the ranks are threads).
torch::Tensor batch(int step, int rank, int micro = 0) {
  return torch::sin(torch::arange(12, torch::kFloat).view({3, 4}) * (step + 1.3) + rank +
                    0.7 * micro);
}

torch::Tensor loss_of(const torch::Tensor& out) { return out.to(torch::kFloat).pow(2).sum(); }

struct Case {
  std::string name;
  MixedPrecision mp;
  // More options (none when empty).
  std::function<DistributedDataParallelOptions(DistributedDataParallelOptions)> configure;
  bool hook = false;
  int micro_batches = 1;  // >1: all but the last under no_sync
};

// The hand-written loop, for every rank at once: the averaged gradient of
// each parameter at `step`, from the full-precision values `master`.
std::vector<torch::Tensor> reference_gradients(const std::vector<torch::Tensor>& master,
                                               const Case& c, int step) {
  const auto compute = c.mp.param_dtype.value_or(torch::kFloat);
  const auto reduce = c.mp.reduce_dtype.value_or(compute);
  std::vector<torch::Tensor> sum(master.size());
  for (int r = 0; r < kRanks; ++r) {
    auto low = std::make_shared<Mlp>();
    low->to(compute);
    {
      torch::NoGradGuard no_grad;
      auto params = low->parameters();
      for (size_t i = 0; i < params.size(); ++i) params[i].copy_(master[i]);
    }
    for (int m = 0; m < c.micro_batches; ++m) {
      loss_of(low->forward(batch(step, r, m).to(compute))).backward();
    }
    auto params = low->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      auto share = params[i].grad().to(reduce) / kRanks;
      sum[i] = sum[i].defined() ? sum[i] + share : share;
    }
  }
  for (auto& g : sum) g = g.to(torch::kFloat);
  return sum;
}

// What differs between DDP and the reference on one rank, or "".
std::string run(const ProcessGroupPtr& pg, const Case& c) {
  auto net = std::make_shared<Mlp>();
  auto options = DistributedDataParallelOptions().process_group(pg).mixed_precision(c.mp);
  DistributedDataParallel model(net, c.configure ? c.configure(options) : options);
  if (c.hook) model->register_comm_hook(pg, allreduce_hook);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  std::vector<torch::Tensor> master;
  for (const auto& p : Mlp().parameters()) master.push_back(p.detach().clone());
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    for (int m = 0; m < c.micro_batches; ++m) {
      auto pass = [&] { loss_of(model->forward(batch(step, pg->rank(), m))).backward(); };
      if (m + 1 < c.micro_batches) {
        model->no_sync(pass);
      } else {
        pass();
      }
    }
    const auto want = reference_gradients(master, c, step);
    auto params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      if (p.scalar_type() != torch::kFloat || p.grad().scalar_type() != torch::kFloat) {
        return "step " + std::to_string(step) + ", parameter " + std::to_string(i) +
               ": dtype " + c10::toString(p.scalar_type()) + ", gradient " +
               c10::toString(p.grad().scalar_type()) + " after backward";
      }
      if (!torch::equal(p.grad(), want[i])) {
        return "step " + std::to_string(step) + ", parameter " + std::to_string(i) +
               ": gradient differs by " +
               std::to_string((p.grad() - want[i]).abs().max().item<double>());
      }
      torch::NoGradGuard no_grad;
      master[i].add_(want[i], -0.1);  // as SGD steps
    }
    opt.step();
    for (size_t i = 0; i < params.size(); ++i) {
      if (!torch::equal(params[i], master[i])) {
        return "step " + std::to_string(step) + ", parameter " + std::to_string(i) +
               ": value differs after the step";
      }
    }
  }
  return "";
}

void expect_reference(const Case& c) {
  std::vector<std::string> failures(kRanks);
  spawn(kRanks, [&](int rank, StorePtr store) {
    failures[rank] = run(make_group(store, rank, kRanks), c);
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], "") << c.name << ", rank " << r;
}

const auto kBf16 = torch::kBFloat16;
const auto kF16 = torch::kHalf;
const auto kF32 = torch::kFloat;

TEST(MixedPrecision, Bf16ComputeFp32Reduction) {
  expect_reference({"bf16/fp32", MixedPrecision{kBf16, kF32, std::nullopt}});
}

TEST(MixedPrecision, Bf16ComputeAndReduction) {
  expect_reference({"bf16/bf16", MixedPrecision{kBf16, kBf16, std::nullopt}});
}

TEST(MixedPrecision, Fp16ComputeReducedInParamDtypeByDefault) {
  try {
    torch::ones({1, 1}, kF16).mm(torch::ones({1, 1}, kF16));
  } catch (const c10::Error&) {  // libtorch 1.13's CPU build has no fp16 matmul
    GTEST_SKIP() << "this libtorch cannot multiply fp16 matrices on the CPU";
  }
  expect_reference({"fp16/(fp16)", MixedPrecision{kF16, std::nullopt, std::nullopt}});
}

TEST(MixedPrecision, ReductionAloneInBf16AndFp16) {
  expect_reference({"fp32/bf16", MixedPrecision{std::nullopt, kBf16, std::nullopt}});
  expect_reference({"fp32/fp16", MixedPrecision{std::nullopt, kF16, std::nullopt}});
}

// The reference itself tells the reduction dtypes apart on this data, so
// the tests above would notice one ignored.
TEST(MixedPrecision, TheReductionDtypeChangesTheResult) {
  std::vector<torch::Tensor> master;
  for (const auto& p : Mlp().parameters()) master.push_back(p.detach().clone());
  const auto in_bf16 = reference_gradients(master, {"", MixedPrecision{kBf16, kBf16}}, 0);
  const auto in_fp32 = reference_gradients(master, {"", MixedPrecision{kBf16, kF32}}, 0);
  bool differ = false;
  for (size_t i = 0; i < master.size(); ++i) differ |= !torch::equal(in_bf16[i], in_fp32[i]);
  EXPECT_TRUE(differ);
}

TEST(MixedPrecision, ComposesWithAHookBucketViewsBatchedCopiesAndNoSync) {
  const MixedPrecision mp{kBf16, kF32, std::nullopt};
  expect_reference({"allreduce_hook", mp, {}, /*hook=*/true});
  expect_reference({"gradient_as_bucket_view", mp, [](DistributedDataParallelOptions o) {
                      return o.gradient_as_bucket_view(true);
                    }});
  expect_reference({"bf16 reduction, gradient_as_bucket_view, batched_grad_copy",
                    MixedPrecision{kBf16, kBf16},
                    [](DistributedDataParallelOptions o) {
                      return o.gradient_as_bucket_view(true).batched_grad_copy(true);
                    }});
  expect_reference({"no_sync, 3 micro-batches", mp, {}, false, /*micro_batches=*/3});
}

struct Normed : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d norm{nullptr};
  Normed() {
    fc = register_module("fc", torch::nn::Linear(4, 4));
    norm = register_module("norm", torch::nn::BatchNorm1d(4));
  }
  torch::Tensor forward(torch::Tensor x) { return norm(fc(x)); }
};

TEST(MixedPrecision, BuffersCastOnceParametersFullOutsideForwardAndBackward) {
  spawn(kRanks, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, kRanks);
    auto net = std::make_shared<Normed>();
    DistributedDataParallel model(net, DistributedDataParallelOptions().process_group(pg).mixed_precision(
                                           MixedPrecision{kBf16, kF32, kBf16}));
    EXPECT_EQ(net->norm->running_mean.scalar_type(), kBf16);
    EXPECT_EQ(net->norm->num_batches_tracked.scalar_type(), torch::kLong);  // not floating
    auto out = model->forward(batch(0, rank));
    EXPECT_EQ(out.scalar_type(), kBf16);
    EXPECT_EQ(net->fc->weight.scalar_type(), kBf16);  // between forward and backward
    loss_of(out).backward();
    EXPECT_EQ(net->fc->weight.scalar_type(), kF32);
    {
      torch::NoGradGuard no_grad;
      model->eval();
      EXPECT_EQ(model->forward(batch(1, rank)).scalar_type(), kBf16);
      EXPECT_EQ(net->fc->weight.scalar_type(), kF32);  // no backward follows: back at once
    }
  });
}

// Every rank's DDP over `make()` with bf16 compute; `use` runs what the
// test wants on it, then every parameter of the module must hold float32
// values again (its own), whatever happened: at once, or with
// `pending_backward` once the module is gone.
template <typename Net>
void expect_parameters_restored(
    const std::function<std::shared_ptr<Net>()>& make,
    const std::function<void(int rank, DistributedDataParallel&)>& use,
    bool pending_backward = false) {
  std::vector<std::string> wrong(kRanks);
  spawn(kRanks, [&](int rank, StorePtr store) {
    auto net = make();
    auto pg = make_group(store, rank, kRanks);
    {
      DistributedDataParallel model(net, DistributedDataParallelOptions().process_group(pg).mixed_precision(
                                             MixedPrecision{kBf16, kF32}));
      use(rank, model);
      for (const auto& p : net->parameters()) {
        if (p.scalar_type() != (pending_backward ? kBf16 : kF32)) wrong[rank] = "after use";
      }
    }
    for (const auto& p : net->parameters()) {
      if (p.scalar_type() != kF32) wrong[rank] += " after the module is gone";
    }
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(wrong[r], "") << "rank " << r;
}

struct Throwing : Mlp {
  torch::Tensor forward(torch::Tensor x) {
    if (x.size(0) == 1) throw std::runtime_error("one row");
    return Mlp::forward(x);
  }
};

TEST(MixedPrecision, AForwardThatThrowsGivesTheParametersBack) {
  expect_parameters_restored<Throwing>([] { return std::make_shared<Throwing>(); },
                                       [](int rank, DistributedDataParallel& model) {
                                         EXPECT_THROW(model->forward(batch(0, rank).narrow(0, 0, 1)),
                                                      std::exception);
                                       });
}

TEST(MixedPrecision, ABackwardThatRaisesGivesTheParametersBack) {
  // b unused on every rank, without find_unused_parameters: the backward
  // raises InvalidArgument on every rank.
  struct Skipping : Mlp {
    torch::Tensor forward(torch::Tensor x) { return torch::relu(a(x)).sum(1); }
  };
  expect_parameters_restored<Skipping>([] { return std::make_shared<Skipping>(); },
                                       [](int rank, DistributedDataParallel& model) {
                                         auto out = model->forward(batch(0, rank));
                                         EXPECT_TRUE(raised([&] { loss_of(out).backward(); }));
                                       });
}

TEST(MixedPrecision, AModuleDestroyedBeforeItsBackwardGivesTheParametersBack) {
  expect_parameters_restored<Mlp>([] { return std::make_shared<Mlp>(); },
                                  [](int rank, DistributedDataParallel& model) {
                                    model->forward(batch(0, rank));  // no backward
                                  },
                                  /*pending_backward=*/true);
}

// A forward whose result DDP cannot see into (not a tensor, vector or
// tuple): the Reducer still ends the backward, and the parameters come back.
struct Pair {
  torch::Tensor first, second;
};
struct PairNet : Mlp {
  Pair forward(torch::Tensor x) { return {Mlp::forward(x), x}; }
};

TEST(MixedPrecision, AResultOfAnotherTypeStillGivesTheParametersBack) {
  expect_parameters_restored<PairNet>([] { return std::make_shared<PairNet>(); },
                                      [](int rank, DistributedDataParallel& model) {
                                        loss_of(model->forward<Pair>(batch(0, rank)).first).backward();
                                      });
}

// The same weight under two names (tied embedding and decoder).
struct Tied : Mlp {
  Tied() { register_parameter("tied", a->weight); }
};

TEST(MixedPrecision, ATiedParameterIsLoweredOnceAndComesBack) {
  expect_parameters_restored<Tied>([] { return std::make_shared<Tied>(); },
                                   [](int rank, DistributedDataParallel& model) {
                                     loss_of(model->forward(batch(0, rank))).backward();
                                   });
}

TEST(MixedPrecision, ZeroOverlapWithDdpIsRefused) {
  expect_parameters_restored<Mlp>(
      [] { return std::make_shared<Mlp>(); }, [](int rank, DistributedDataParallel& model) {
        ZeroRedundancyOptimizer opt(model->parameters(), torch::optim::SGDOptions(0.1),
                                    ZeroOptions().process_group(model->join_process_group())
                                        .overlap_with_ddp(true));
        auto refused = raised([&] { model->register_comm_hook(&opt, zero_hook); });
        EXPECT_TRUE(refused) << "rank " << rank << ": " << refused;
        EXPECT_TRUE(refused.mentions("overlap_with_ddp")) << refused;
      });
}

TEST(MixedPrecision, ADtypeThatIsNotFloatingPointIsAnInvalidArgumentOnEveryRank) {
  std::vector<Raised> results(kRanks);
  spawn(kRanks, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, kRanks);
    MixedPrecision mp;
    if (rank == 1) mp.reduce_dtype = torch::kInt;  // one rank's mistake
    results[rank] = raised([&] {
      DistributedDataParallel model(std::make_shared<Mlp>(),
                                    DistributedDataParallelOptions().process_group(pg).mixed_precision(mp));
    });
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(results[r]) << "rank " << r << ": " << results[r];
  }
  EXPECT_TRUE(results[1].mentions("reduce_dtype")) << results[1];
}

}  // namespace
}  // namespace ddp::testing
