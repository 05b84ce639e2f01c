// SyncBatchNorm as a module: convert_sync_batchnorm, evaluation without
// collectives, errors, subgroups, and inside DistributedDataParallel.
#include "collectives/issued_log.h"
#include "spawn.h"
#include "support/raised.h"

#include <ddp/ddp.h>

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/torch.h>

#include <atomic>
#include <numeric>

namespace ddp::testing {
namespace {

namespace nn = torch::nn;

bool is_sync(const std::shared_ptr<nn::Module>& m) {
  return std::dynamic_pointer_cast<SyncBatchNormImpl>(m) != nullptr;
}

TEST(ConvertSyncBatchNorm, SwapsEveryContainerKeepingNamesTensorsAndMode) {
  nn::ModuleDict dict(std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>>{
      {"norm", nn::BatchNorm3d(2).ptr()}, {"lin", nn::Linear(2, 2).ptr()}});
  nn::ModuleList list(nn::BatchNorm1d(4), nn::Linear(4, 4));
  nn::Sequential inner(nn::Conv2d(1, 3, 1),
                       nn::BatchNorm2d(nn::BatchNormOptions(3).momentum(c10::nullopt)));
  // Plain modules reaching their children by name only.
  struct Holder : nn::Module {
    Holder() { register_module("bn", nn::BatchNorm1d(5)); }
  };
  auto net = std::make_shared<nn::Module>();
  net->register_module("inner", inner);
  net->register_module("list", list);
  net->register_module("dict", dict);
  net->register_module("holder", std::make_shared<Holder>());
  net->eval();
  inner[1]->train();  // modes are kept per module

  const auto before = net->named_parameters();
  const auto buffers_before = net->named_buffers();
  const nn::Module* old_bn2 = inner->ptr(1).get();
  auto converted = convert_sync_batchnorm(net);
  EXPECT_EQ(converted, net);

  EXPECT_TRUE(is_sync(inner->ptr(1)));
  EXPECT_TRUE(is_sync(inner->named_children()["1"]));
  EXPECT_TRUE(is_sync(list[0]));
  EXPECT_TRUE(is_sync(dict["norm"]));
  EXPECT_TRUE(is_sync(net->named_modules()["holder.bn"]));
  EXPECT_FALSE(is_sync(list[1]));
  auto bn2 = std::dynamic_pointer_cast<SyncBatchNormImpl>(inner->ptr(1));
  EXPECT_EQ(bn2->input_dims(), 2);
  EXPECT_FALSE(bn2->options.momentum().has_value());
  EXPECT_TRUE(bn2->is_training());
  EXPECT_FALSE(list[0]->is_training());
  EXPECT_FALSE(inner->is_training());
  EXPECT_FALSE(net->is_training());
  // Same names, and the very same tensors (an optimizer made before still works).
  const auto after = net->named_parameters();
  ASSERT_EQ(after.keys(), before.keys());
  for (const auto& item : before) {
    EXPECT_TRUE(after[item.key()].is_same(item.value())) << item.key();
  }
  const auto buffers_after = net->named_buffers();
  ASSERT_EQ(buffers_after.keys(), buffers_before.keys());
  for (const auto& item : buffers_before) {
    EXPECT_TRUE(buffers_after[item.key()].is_same(item.value())) << item.key();
  }
  // The Sequential's forward runs the new module.
  EXPECT_TRUE(is_sync(inner->begin()[1].ptr()));
  EXPECT_NE(old_bn2, inner->ptr(1).get());

  // A BatchNorm at the root is returned converted.
  EXPECT_TRUE(is_sync(convert_sync_batchnorm(nn::BatchNorm1d(3).ptr())));
}

TEST(ConvertSyncBatchNorm, MemberFieldIsAnErrorAndNothingChanges) {
  struct Net : nn::Module {
    Net() {
      seq = register_module("seq", nn::Sequential(nn::Linear(2, 2), nn::BatchNorm1d(2)));
      bn = register_module("bn", nn::BatchNorm1d(2));
    }
    nn::Sequential seq{nullptr};
    nn::BatchNorm1d bn{nullptr};
  };
  auto net = std::make_shared<Net>();
  Raised r = raised<InvalidArgument>([&] { convert_sync_batchnorm(net); });
  EXPECT_TRUE(r) << "a BatchNorm held by a member field was swapped silently: " << r;
  EXPECT_EQ(r.context.operation, "convert_sync_batchnorm") << r;
  EXPECT_TRUE(r.mentions("'bn'")) << r;                    // the member's path
  EXPECT_TRUE(r.mentions("torch::nn::BatchNorm1d")) << r;  // its type
  EXPECT_TRUE(r.mentions("ddp::SyncBatchNorm1d")) << r;    // the type to declare instead
  EXPECT_FALSE(is_sync(net->seq->ptr(1)));                 // all or nothing
}

TEST(SyncBatchNorm, EvalRunsNoCollectiveAndUsesRunningStats) {
  spawn(2, [](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    SyncBatchNorm2d bn(nn::BatchNormOptions(3), pg);
    bn->forward(torch::randn({rank + 2, 3, 2, 2}));  // training: one allreduce
    bn->eval();
    ddp::detail::take_tally(*pg);
    nn::BatchNorm2d plain(3);
    plain->running_mean.copy_(bn->running_mean);
    plain->running_var.copy_(bn->running_var);
    plain->eval();
    // Only rank 0 evaluates: a collective here would leave it waiting.
    if (rank == 0) {
      auto x = torch::randn({4, 3, 2, 2});
      EXPECT_TRUE(torch::allclose(bn->forward(x), plain->forward(x)));
    }
    EXPECT_EQ(ddp::detail::take_tally(*pg).count, 0u);
  });
}

TEST(SyncBatchNorm, NoValuesOnAnyRankIsAnErrorOnEveryRank) {
  for (int64_t last : {0, 1}) {
    std::atomic<int> errors{0};
    spawn(3, [&](int rank, StorePtr store) {
      auto pg = make_group(store, rank, 3);
      SyncBatchNorm1d bn(nn::BatchNormOptions(4), pg);
      Raised r = raised<InvalidArgument>([&] {
        bn->forward(torch::randn({rank == 2 ? last : 0, 4}));
      });
      EXPECT_TRUE(r) << r;
      EXPECT_EQ(r.context.rank, rank) << r;
      EXPECT_EQ(r.context.world_size, 3) << r;
      EXPECT_EQ(r.context.operation, "SyncBatchNorm") << r;
      if (r) ++errors;
    });
    EXPECT_EQ(errors.load(), 3);
  }
}

TEST(SyncBatchNorm, SubgroupsSyncOnlyTheirRanks) {
  // Ranks {0, 1} and {2, 3}: two groups of 2 on stores of their own.
  std::vector<StorePtr> stores = {c10::make_intrusive<c10d::HashStore>(),
                                  c10::make_intrusive<c10d::HashStore>()};
  torch::manual_seed(3);
  const auto x = torch::randn({8, 2}, torch::kFloat64);
  std::vector<torch::Tensor> want(2);
  for (int half = 0; half < 2; ++half) {
    nn::BatchNorm1d plain(2);
    plain->to(torch::kFloat64);
    want[half] = plain->forward(x.narrow(0, 4 * half, 4));
  }
  spawn(4, [&](int rank, StorePtr) {
    const int half = rank / 2;
    auto sub = make_group(stores[half], rank % 2, 2);
    SyncBatchNorm1d bn(nn::BatchNormOptions(2), sub);
    bn->to(torch::kFloat64);
    auto y = bn->forward(x.narrow(0, 2 * rank, 2));
    EXPECT_TRUE(torch::allclose(y, want[half].narrow(0, 2 * (rank % 2), 2), 0, 1e-12));
  });
}

}  // namespace
}  // namespace ddp::testing

namespace ddp::testing {
namespace {

nn::Sequential bn_mlp() {
  return nn::Sequential(nn::Linear(4, 6), nn::BatchNorm1d(6), nn::Tanh(), nn::Linear(6, 2));
}

// DDP averages parameter gradients; SyncBatchNorm makes each rank's input
// gradient that of the global batch: together, training on uneven ranks is
// training on the concatenated batch with the loss divided by the world size.
TEST(SyncBatchNorm, InsideDdpEqualsOneProcessOnTheWholeBatch) {
  const std::vector<std::vector<int64_t>> splits = {{4}, {2, 6}, {3, 0, 5}, {1, 2, 3, 2}};
  for (const auto& split : splits) {
    const int world = static_cast<int>(split.size());
    const int64_t total = std::accumulate(split.begin(), split.end(), int64_t{0});
    const int steps = 3;
    torch::manual_seed(11);
    auto reference = bn_mlp();
    reference->to(torch::kFloat64);
    std::vector<torch::Tensor> xs, gs;
    for (int s = 0; s < steps; ++s) {
      xs.push_back(torch::randn({total, 4}, torch::kFloat64) + 1);
      gs.push_back(torch::randn({total, 2}, torch::kFloat64));
    }
    // Copies of the initial state for the ranks, before the reference trains.
    std::vector<torch::Tensor> initial;
    for (const auto& p : reference->parameters()) initial.push_back(p.detach().clone());
    torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int s = 0; s < steps; ++s) {
      ref_opt.zero_grad();
      ((reference->forward(xs[s]) * gs[s]).sum() / world).backward();
      ref_opt.step();
    }

    spawn(world, [&](int rank, StorePtr store) {
      auto pg = make_group(store, rank, world);
      auto net = bn_mlp();
      net->to(torch::kFloat64);
      {
        torch::NoGradGuard no_grad;
        const auto params = net->parameters();
        for (size_t i = 0; i < params.size(); ++i) params[i].copy_(initial[i]);
      }
      convert_sync_batchnorm(net.ptr(), pg);
      // Running statistics agree on every rank by construction: no broadcast.
      DistributedDataParallel model(
          net, DistributedDataParallelOptions().process_group(pg).broadcast_buffers(false));
      torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
      const int64_t begin = std::accumulate(split.begin(), split.begin() + rank, int64_t{0});
      for (int s = 0; s < steps; ++s) {
        opt.zero_grad();
        auto out = model->forward(xs[s].narrow(0, begin, split[rank]));
        (out * gs[s].narrow(0, begin, split[rank])).sum().backward();
        opt.step();
      }
      const auto got = net->named_parameters();
      for (const auto& item : reference->named_parameters()) {
        EXPECT_TRUE(torch::allclose(got[item.key()], item.value(), 0, 1e-10))
            << "world " << world << " rank " << rank << ": " << item.key();
      }
      const auto got_buffers = net->named_buffers();
      for (const auto& item : reference->named_buffers()) {
        EXPECT_TRUE(torch::allclose(got_buffers[item.key()].to(torch::kFloat64),
                                    item.value().to(torch::kFloat64), 0, 1e-10))
            << "world " << world << " rank " << rank << ": " << item.key();
      }
    });
  }
}

}  // namespace
}  // namespace ddp::testing
