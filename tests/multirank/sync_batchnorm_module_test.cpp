// SyncBatchNorm as a module: convert_sync_batchnorm, evaluation without
// collectives, errors, subgroups, and inside DistributedDataParallel.
#include "spawn.h"

#include <ddp/ddp.h>

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/torch.h>

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
  nn::Sequential inner(nn::Conv2d(1, 3, 1), nn::BatchNorm2d(nn::BatchNormOptions(3).momentum(c10::nullopt)));
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
  try {
    convert_sync_batchnorm(net);
    FAIL() << "a BatchNorm held by a member field was swapped silently";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'bn' (torch::nn::BatchNorm1d)"), std::string::npos) << what;
    EXPECT_NE(what.find("ddp::SyncBatchNorm1d"), std::string::npos) << what;
  }
  EXPECT_FALSE(is_sync(net->seq->ptr(1)));  // all or nothing
}

TEST(SyncBatchNorm, EvalRunsNoCollectiveAndUsesRunningStats) {
  spawn(2, [](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    SyncBatchNorm2d bn(nn::BatchNormOptions(3), pg);
    bn->forward(torch::randn({rank + 2, 3, 2, 2}));  // training: one allreduce
    bn->eval();
    pg->take_tally();
    nn::BatchNorm2d plain(3);
    plain->running_mean.copy_(bn->running_mean);
    plain->running_var.copy_(bn->running_var);
    plain->eval();
    // Only rank 0 evaluates: a collective here would leave it waiting.
    if (rank == 0) {
      auto x = torch::randn({4, 3, 2, 2});
      EXPECT_TRUE(torch::allclose(bn->forward(x), plain->forward(x)));
    }
    EXPECT_EQ(pg->take_tally().count, 0u);
  });
}

TEST(SyncBatchNorm, NoValuesOnAnyRankIsAnErrorOnEveryRank) {
  for (int64_t last : {0, 1}) {
    std::atomic<int> errors{0};
    spawn(3, [&](int rank, StorePtr store) {
      auto pg = make_group(store, rank, 3);
      SyncBatchNorm1d bn(nn::BatchNormOptions(4), pg);
      try {
        bn->forward(torch::randn({rank == 2 ? last : 0, 4}));
      } catch (const InvalidArgument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("on rank " + std::to_string(rank) + " of 3"), std::string::npos);
        EXPECT_NE(what.find("more than 1 value per channel over all ranks"), std::string::npos)
            << what;
        ++errors;
      }
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
