// DDP's options from PyTorch 2.x, threads as ranks:
// - ddp::verify_same_model and init_sync(false): the same model passes; a
//   value, a buffer or a shape that differs on some rank is an
//   InvalidArgument on every rank naming the tensor and those ranks;
//   init_sync(false) broadcasts nothing, and with DDP_DEBUG=detail checks
//   every value;
// - bucket_cap_mb_list: the buckets it cuts, and its misuse;
// - skip_all_reduce_unused_params: its misuse, and ranks whose unused
//   parameters differ under DDP_DEBUG=detail.
// - batched_grad_copy: the same gradients bit for bit as the copy per
//   gradient, with hooks, gradient_as_bucket_view, unused parameters and
//   no_sync, in two operator calls per bucket.
// (Their equivalence to local training: multiprocess/ddp_equivalence.cpp.)
#include "spawn.h"
#include "support/raised.h"

#include <ddp/distributed_data_parallel.h>
#include <ddp/errors.h>
#include <ddp/hooks.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace ddp::testing {
namespace {

constexpr int kRanks = 3;

// fc1 -> batch norm -> fc2, the same values on every rank without drawing
// from the shared generator.
struct Net : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::BatchNorm1d norm{nullptr};
  explicit Net(int64_t hidden = 8) {
    fc1 = register_module("fc1", torch::nn::Linear(4, hidden));
    norm = register_module("norm", torch::nn::BatchNorm1d(hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 2));
    torch::NoGradGuard no_grad;
    int i = 0;
    for (auto& p : parameters()) p.copy_(torch::linspace(-1, 1, p.numel()).view_as(p) * ++i);
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(norm(fc1(x))); }
};

// Every rank's verify_same_model on its Net (made by `make`, changed by `change`).
std::vector<Raised> verify_all(const std::function<std::shared_ptr<Net>(int)>& make,
                               const std::function<void(int, Net&)>& change) {
  std::vector<Raised> results(kRanks);
  spawn(kRanks, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, kRanks);
    auto net = make(rank);
    {
      torch::NoGradGuard no_grad;
      change(rank, *net);
    }
    results[rank] = raised([&] { verify_same_model(*net, pg); });
  });
  return results;
}

std::shared_ptr<Net> same(int) { return std::make_shared<Net>(); }

TEST(VerifySameModel, TheSameModelPasses) {
  auto results = verify_all(same, [](int, Net&) {});
  for (const auto& r : results) EXPECT_EQ(r.wrong, "no error") << r;
}

TEST(VerifySameModel, AValueThatDiffersIsNamedOnEveryRank) {
  auto results = verify_all(same, [](int rank, Net& net) {
    if (rank == 2) net.fc2->bias[1] += 1e-6;
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(results[r]) << "rank " << r << ": " << results[r];
    EXPECT_TRUE(results[r].mentions("fc2.bias")) << results[r];
    EXPECT_EQ(results[r].context.peers, std::vector<int>{2}) << results[r];
  }
}

TEST(VerifySameModel, ABufferThatDiffersIsNamed) {
  auto results = verify_all(same, [](int rank, Net& net) {
    if (rank != 0) net.norm->running_mean.fill_(rank);
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(results[r]) << "rank " << r << ": " << results[r];
    EXPECT_TRUE(results[r].mentions("norm.running_mean")) << results[r];
    EXPECT_EQ(results[r].context.peers, (std::vector<int>{1, 2})) << results[r];
  }
}

TEST(VerifySameModel, AShapeThatDiffersIsNamed) {
  auto results = verify_all([](int rank) { return std::make_shared<Net>(rank == 1 ? 6 : 8); },
                            [](int, Net&) {});
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(results[r]) << "rank " << r << ": " << results[r];
    EXPECT_TRUE(results[r].mentions("fc1.weight")) << results[r];
  }
}

// Rank 1's fc1.weight after DDP's construction with `init_sync`, on every rank.
std::vector<float> first_weight_after_ddp(bool init_sync) {
  std::vector<float> seen(kRanks);
  spawn(kRanks, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, kRanks);
    auto net = std::make_shared<Net>();
    {
      torch::NoGradGuard no_grad;
      net->fc1->weight[0][0].fill_(100 + rank);
    }
    DistributedDataParallel model(
        net, DistributedDataParallelOptions().process_group(pg).init_sync(init_sync));
    seen[rank] = net->fc1->weight[0][0].item<float>();
  });
  return seen;
}

TEST(InitSync, TrueBroadcastsRankZerosFalseLeavesEachRanks) {
  EXPECT_EQ(first_weight_after_ddp(true), (std::vector<float>{100, 100, 100}));
  EXPECT_EQ(first_weight_after_ddp(false), (std::vector<float>{100, 101, 102}));
}

TEST(InitSync, FalseWithDebugDetailChecksEveryValue) {
  setenv("DDP_DEBUG", "detail", 1);
  std::vector<Raised> results(kRanks);
  spawn(kRanks, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, kRanks);
    auto net = std::make_shared<Net>();
    if (rank == 1) {
      torch::NoGradGuard no_grad;
      net->norm->weight[0] += 1;
    }
    results[rank] = raised([&] {
      DistributedDataParallel model(
          net, DistributedDataParallelOptions().process_group(pg).init_sync(false));
    });
  });
  unsetenv("DDP_DEBUG");
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(results[r]) << "rank " << r << ": " << results[r];
    EXPECT_TRUE(results[r].mentions("norm.weight")) << results[r];
  }
}

// The bucket sizes DDP cut with `options`, on rank 0 (empty: every rank raised `error`).
std::vector<int64_t> bucket_bytes_with(DistributedDataParallelOptions options,
                                       std::vector<Raised>* errors = nullptr) {
  std::vector<int64_t> bytes;
  if (errors) errors->assign(kRanks, Raised{});
  spawn(kRanks, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, kRanks);
    auto net = std::make_shared<Net>(64);
    auto opts = options;
    auto make = [&] {
      DistributedDataParallel model(net, opts.process_group(pg));
      model->forward(torch::randn({4, 4})).sum().backward();
      if (rank == 0) bytes = model->stats().bucket_bytes;
    };
    if (errors) {
      (*errors)[rank] = raised(make);
    } else {
      make();
    }
  });
  return bytes;
}

TEST(BucketCapMbList, EachBucketClosesAtItsCapTheLastRepeating) {
  // Parameters in backward order: fc2.bias 8 B, fc2.weight 512 B, norm.bias
  // and norm.weight 256 B each, fc1.bias 256 B, fc1.weight 1024 B.
  const double kib = 1.0 / 1024;
  EXPECT_EQ(bucket_bytes_with(DistributedDataParallelOptions().bucket_cap_mb_list({0.5 * kib})),
            (std::vector<int64_t>{520, 512, 256, 1024}));
  EXPECT_EQ(bucket_bytes_with(DistributedDataParallelOptions().bucket_cap_mb_list({0, 1})),
            (std::vector<int64_t>{8, 2304}));
}

TEST(BucketCapMbList, MisuseIsAnInvalidArgumentOnEveryRank) {
  std::vector<Raised> errors;
  bucket_bytes_with(DistributedDataParallelOptions().bucket_cap_mb_list({1, -2}), &errors);
  for (const auto& r : errors) {
    EXPECT_TRUE(r) << r;
    EXPECT_TRUE(r.mentions("bucket_cap_mb_list")) << r;
  }
  bucket_bytes_with(
      DistributedDataParallelOptions().bucket_cap_mb(BucketCapMb("auto")).bucket_cap_mb_list({1}),
      &errors);
  for (const auto& r : errors) {
    EXPECT_TRUE(r) << r;
    EXPECT_TRUE(r.mentions("auto")) << r;
  }
}

// Two branches, one used per forward.
struct TwoWay : torch::nn::Module {
  torch::nn::Linear left{nullptr}, right{nullptr}, head{nullptr};
  TwoWay() {
    left = register_module("left", torch::nn::Linear(4, 4));
    right = register_module("right", torch::nn::Linear(4, 4));
    head = register_module("head", torch::nn::Linear(4, 2));
  }
  torch::Tensor forward(torch::Tensor x, int64_t branch) {
    return head(branch == 0 ? left(x) : right(x));
  }
};

// Every rank's error from DDP made with `options`, then one forward and
// backward through branch `branch_of(rank)`.
std::vector<Raised> skip_errors(DistributedDataParallelOptions options,
                                const std::function<int64_t(int)>& branch_of) {
  std::vector<Raised> results(kRanks);
  spawn(kRanks, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, kRanks);
    auto opts = options;
    results[rank] = raised([&] {
      DistributedDataParallel model(std::make_shared<TwoWay>(), opts.process_group(pg));
      model->forward(torch::randn({2, 4}), branch_of(rank)).sum().backward();
    });
  });
  return results;
}

TEST(SkipAllReduceUnusedParams, NeedsFindUnusedParameters) {
  for (const auto& r : skip_errors(DistributedDataParallelOptions().skip_all_reduce_unused_params(true),
                                   [](int) { return int64_t{0}; })) {
    EXPECT_TRUE(r) << r;
    EXPECT_TRUE(r.mentions("find_unused_parameters")) << r;
  }
}

TEST(SkipAllReduceUnusedParams, TheSameUnusedSetTrains) {
  for (const auto& r : skip_errors(DistributedDataParallelOptions()
                                       .find_unused_parameters(true)
                                       .skip_all_reduce_unused_params(true),
                                   [](int) { return int64_t{1}; })) {
    EXPECT_EQ(r.wrong, "no error") << r;
  }
}

TEST(SkipAllReduceUnusedParams, DifferentUnusedSetsAreNamedWithDebugDetail) {
  setenv("DDP_DEBUG", "detail", 1);
  auto results = skip_errors(
      DistributedDataParallelOptions().find_unused_parameters(true).skip_all_reduce_unused_params(
          true),
      [](int rank) { return int64_t{rank == 2 ? 1 : 0}; });
  unsetenv("DDP_DEBUG");
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(results[r]) << "rank " << r << ": " << results[r];
    EXPECT_TRUE(results[r].mentions("left.")) << results[r];
    EXPECT_EQ(results[r].context.operation, "skip_all_reduce_unused_params") << results[r];
  }
}

// Two DDP models, one with batched_grad_copy, trained side by side on the
// same data (`configure` sets the rest, `hook` registers a communication
// hook on both or none): their gradients must be equal bit for bit after
// every backward. Each rank's statistics of the last iteration, as
// {per-gradient fill ops, batched fill ops, buckets}, go to `ops`.
void expect_batched_equal(
    const std::function<DistributedDataParallelOptions(DistributedDataParallelOptions)>& configure,
    bool hook, std::vector<std::vector<int64_t>>* ops = nullptr) {
  std::vector<std::string> failures(kRanks);
  if (ops) ops->assign(kRanks, {});
  spawn(kRanks, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, kRanks);
    // The same values in both (the ranks' threads share the generator).
    auto first = std::make_shared<TwoWay>(), second = std::make_shared<TwoWay>();
    {
      torch::NoGradGuard no_grad;
      auto from = first->parameters(), to = second->parameters();
      for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
    }
    auto make = [&](std::shared_ptr<TwoWay> net, bool batched) {
      DistributedDataParallel model(
          net,
          configure(DistributedDataParallelOptions().process_group(pg).batched_grad_copy(batched)));
      if (hook) model->register_comm_hook(pg, fp16_compress_hook);
      return model;
    };
    auto one = make(first, false);
    auto batched = make(second, true);
    for (int step = 0; step < 4; ++step) {
      for (auto* m : {&one, &batched}) {
        for (auto& p : (*m)->parameters()) p.mutable_grad() = torch::Tensor();
      }
      const auto x = torch::randn({3, 4});
      for (auto* m : {&one, &batched}) {
        if (step == 2) {  // a no_sync pass first, through the other branch
          auto guard = (*m)->no_sync();
          (*m)->forward(x, int64_t{1}).sum().backward();
        }
        (*m)->forward(x, int64_t{step % 2 == 0 ? 0 : (rank % 2)}).sum().backward();
      }
      auto want = one->parameters(), got = batched->parameters();
      for (size_t i = 0; i < want.size(); ++i) {
        const bool same = want[i].grad().defined() == got[i].grad().defined() &&
                          (!want[i].grad().defined() || torch::equal(want[i].grad(), got[i].grad()));
        if (!same && failures[rank].empty()) {
          failures[rank] = "step " + std::to_string(step) + ", parameter " + std::to_string(i);
        }
      }
    }
    if (ops) {
      (*ops)[rank] = {one->stats().bucket_fill_ops, batched->stats().bucket_fill_ops,
                      static_cast<int64_t>(batched->stats().bucket_count())};
    }
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

TEST(BatchedGradCopy, SameGradientsBitForBitInTwoCallsPerBucket) {
  std::vector<std::vector<int64_t>> ops;
  // Step 3 leaves a branch unused on every rank (`right` on even ranks,
  // `left` on odd ones): zeros go into its slices.
  expect_batched_equal(
      [](DistributedDataParallelOptions o) {
        return o.find_unused_parameters(true).bucket_cap_mb_list({1.0 / 1024 / 16, 1});
      },
      /*hook=*/false, &ops);
  for (int r = 0; r < kRanks; ++r) {
    // Per gradient: one call for each of the 6 parameters. Batched: a copy
    // (or a zeroing) and a division per bucket; one more call in the bucket
    // that holds both gradients and the unused branch's zeros, if one does.
    const int64_t buckets = ops[r][2];
    EXPECT_EQ(ops[r][0], 6) << "rank " << r;
    EXPECT_GE(ops[r][1], 2 * buckets) << "rank " << r;
    EXPECT_LE(ops[r][1], 2 * buckets + 1) << "rank " << r;
    EXPECT_EQ(buckets, 2) << "rank " << r;
  }
}

TEST(BatchedGradCopy, SameGradientsWithGradientAsBucketView) {
  expect_batched_equal(
      [](DistributedDataParallelOptions o) {
        return o.gradient_as_bucket_view(true).find_unused_parameters(true);
      },
      /*hook=*/false);
}

TEST(BatchedGradCopy, SameGradientsWithACommunicationHook) {
  expect_batched_equal(
      [](DistributedDataParallelOptions o) { return o.find_unused_parameters(true); },
      /*hook=*/true);
}

}  // namespace
}  // namespace ddp::testing
