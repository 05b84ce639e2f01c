// ZeRO inside DDP, with and without overlap_with_ddp: N ranks on their
// slices of a batch train to the parameters of the unsharded optimizer in one
// process on the whole batch (loss divided by N), from the first iteration.
#include "spawn.h"
#include "support/raised.h"

#include <ddp/ddp.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>

namespace ddp::testing {
namespace {

namespace nn = torch::nn;
namespace optim = torch::optim;

nn::Sequential make_net(torch::Dtype dtype) {
  nn::Sequential net(nn::Linear(6, 24), nn::Tanh(), nn::Linear(24, 24), nn::Tanh(),
                     nn::Linear(24, 3));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(21);  // ranks are threads
  torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) p.copy_(at::randn(p.sizes(), gen, torch::kFloat64) * 0.4);
  net->to(dtype);
  return net;
}

struct Data {
  std::vector<torch::Tensor> x, g;
};

Data make_data(int64_t per_rank, int world, int steps) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(22);
  Data d;
  for (int s = 0; s < steps; ++s) {
    d.x.push_back(at::randn({per_rank * world, 6}, gen, torch::kFloat64));
    d.g.push_back(at::randn({per_rank * world, 3}, gen, torch::kFloat64));
  }
  return d;
}

template <typename Options>
void check(const Options& defaults, const std::string& name) {
  const int steps = 4;
  const int64_t per_rank = 3;
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-6;
    for (int world = 1; world <= 4; ++world) {
      const Data data = make_data(per_rank, world, steps);
      auto reference = make_net(dtype);
      typename ZeroOptimizerTraits<Options>::Optimizer plain(reference->parameters(), defaults);
      for (int s = 0; s < steps; ++s) {
        plain.zero_grad();
        auto out = reference->forward(data.x[s].to(dtype));
        ((out * data.g[s].to(dtype)).sum() / world).backward();
        plain.step();
      }
      for (bool overlap : {false, true}) {
        const std::string what = name + (overlap ? " overlapped" : "") + " world " +
                                 std::to_string(world) +
                                 (dtype == torch::kFloat64 ? " f64" : " f32");
        spawn(world, [&](int rank, StorePtr store) {
          auto pg = make_group(store, rank, world);
          auto net = make_net(dtype);
          // Tiny buckets: several per iteration, each its own hook call.
          DistributedDataParallel model(net, DistributedDataParallelOptions()
                                                 .process_group(pg)
                                                 .bucket_cap_mb(0.001)
                                                 .first_bucket_cap_mb(0.001));
          ZeroRedundancyOptimizer opt(model->parameters(), defaults,
                                      ZeroOptions().process_group(pg).overlap_with_ddp(overlap));
          if (overlap) model->register_comm_hook(&opt, zero_hook);
          for (int s = 0; s < steps; ++s) {
            opt.zero_grad();
            auto x = data.x[s].narrow(0, rank * per_rank, per_rank).to(dtype);
            auto g = data.g[s].narrow(0, rank * per_rank, per_rank).to(dtype);
            (model->forward(x) * g).sum().backward();
            opt.step();
            if (overlap && s == 0) {
              // Updated during the first backward already.
              EXPECT_FALSE(torch::equal(net->parameters()[0], make_net(dtype)->parameters()[0]))
                  << what;
            }
          }
          const auto want = reference->parameters();
          const auto got = net->parameters();
          for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_LE((got[i] - want[i]).abs().max().template item<double>(), tol)
                << what << " rank " << rank << ": parameter #" << i;
          }
        });
      }
    }
  }
}

TEST(ZeroWithDdp, SgdMomentumEqualsUnsharded) {
  check(optim::SGDOptions(0.1).momentum(0.9), "SGD");
}
TEST(ZeroWithDdp, AdamEqualsUnsharded) { check(optim::AdamOptions(1e-2), "Adam"); }

TEST(ZeroWithDdp, OverlapOverASubsetOfTheParametersIsAnErrorOnEveryRank) {
  std::atomic<int> errors{0};
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    auto net = make_net(torch::kFloat64);
    DistributedDataParallel model(net, DistributedDataParallelOptions().process_group(pg));
    auto params = model->parameters();
    params.pop_back();  // the last Linear's bias
    ZeroRedundancyOptimizer opt(params, optim::SGDOptions(0.1),
                                ZeroOptions().process_group(pg).overlap_with_ddp(true));
    model->register_comm_hook(&opt, zero_hook);
    Raised r = raised<InvalidArgument>([&] {
      model->forward(torch::randn({2, 6}, torch::kFloat64)).sum().backward();
    });
    EXPECT_TRUE(r) << r;
    EXPECT_EQ(r.context.operation, "zero_hook") << r;
    EXPECT_EQ(r.context.rank, rank) << r;
    EXPECT_EQ(r.context.world_size, 2) << r;
    EXPECT_TRUE(r.mentions("[3]")) << r;     // the left-out bias's shape
    EXPECT_TRUE(r.mentions("Double")) << r;  // and dtype
    if (r) ++errors;
  });
  EXPECT_EQ(errors.load(), 2);
}

TEST(ZeroWithDdp, OverlapStepWithoutTheHookIsAnError) {
  spawn(1, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 1);
    auto net = make_net(torch::kFloat64);
    DistributedDataParallel model(net, DistributedDataParallelOptions().process_group(pg));
    ZeroRedundancyOptimizer opt(model->parameters(), optim::SGDOptions(0.1),
                                ZeroOptions().process_group(pg).overlap_with_ddp(true));
    model->forward(torch::randn({2, 6}, torch::kFloat64)).sum().backward();
    Raised r = raised<InvalidArgument>([&] { opt.step(); });
    EXPECT_TRUE(r) << "step() without the hook passed: " << r;
    EXPECT_EQ(r.context.operation, "ZeroRedundancyOptimizer::step") << r;
    EXPECT_EQ(r.context.rank, 0) << r;
    EXPECT_TRUE(r.mentions("overlap_with_ddp")) << r;  // the option that needs the hook
    EXPECT_TRUE(r.mentions(" 6 ")) << r;  // the parameter updates expected (none were made)
  });
}

}  // namespace
}  // namespace ddp::testing

namespace ddp::testing {
namespace {

// Uneven inputs (Join) with overlap_with_ddp: a rank out of batches shadows
// DDP's buckets through the hook, which still steps its shard with the
// averaged gradient and broadcasts it; so ranks with 2, 3 and 4 batches
// train as one process whose step s averages the losses of the ranks that
// have a batch s, divided by the world size.
TEST(ZeroWithDdp, OverlapUnderJoinEqualsUnsharded) {
  const std::vector<int> batches = {2, 3, 4};
  const int world = 3;
  const int64_t per_rank = 3;
  const auto defaults = optim::AdamOptions(1e-2);
  const Data data = make_data(per_rank, world, 4);
  auto reference = make_net(torch::kFloat64);
  optim::Adam plain(reference->parameters(), defaults);
  for (int s = 0; s < 4; ++s) {
    plain.zero_grad();
    torch::Tensor loss = torch::zeros({}, torch::kFloat64);
    for (int r = 0; r < world; ++r) {
      if (s >= batches[r]) continue;
      auto x = data.x[s].narrow(0, r * per_rank, per_rank);
      loss = loss + (reference->forward(x) * data.g[s].narrow(0, r * per_rank, per_rank)).sum();
    }
    (loss / world).backward();
    plain.step();
  }
  spawn(world, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, world);
    auto net = make_net(torch::kFloat64);
    DistributedDataParallel model(
        net,
        DistributedDataParallelOptions().process_group(pg).bucket_cap_mb(0.001).first_bucket_cap_mb(
            0.001));
    ZeroRedundancyOptimizer opt(model->parameters(), defaults,
                                ZeroOptions().process_group(pg).overlap_with_ddp(true));
    model->register_comm_hook(&opt, zero_hook);
    {
      Join join({*model});
      for (int s = 0; s < batches[rank]; ++s) {
        opt.zero_grad();
        auto x = data.x[s].narrow(0, rank * per_rank, per_rank);
        (model->forward(x) * data.g[s].narrow(0, rank * per_rank, per_rank)).sum().backward();
        opt.step();
      }
    }
    const auto want = reference->parameters();
    const auto got = net->parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_LE((got[i] - want[i]).abs().max().item<double>(), 1e-12)
          << "rank " << rank << ": parameter #" << i;
    }
  });
}

}  // namespace
}  // namespace ddp::testing
