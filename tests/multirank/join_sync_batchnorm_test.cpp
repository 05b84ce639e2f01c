// Join with SyncBatchNorm in the model: a rank out of inputs
// replays the model on an empty batch (set_join_shadow_batch), issuing
// SyncBatchNorm's collectives and DDP's in the others' order with zeros.
// Ranks with 3, 5 and 7 batches of uneven sizes then train to the
// parameters and running statistics of one process running BatchNorm on
// each step's concatenated batch; threads as ranks.
#include "spawn.h"
#include "support/raised.h"

#include <ddp/ddp.h>

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <vector>

namespace ddp::testing {
namespace {

namespace nn = torch::nn;

// Two BatchNorms: their forward and backward collectives interleave with
// DDP's buckets when they share its group.
nn::Sequential bn_mlp() {
  nn::Sequential net(nn::Linear(4, 6), nn::BatchNorm1d(6), nn::Tanh(), nn::Linear(6, 5),
                     nn::BatchNorm1d(5), nn::Tanh(), nn::Linear(5, 2));
  net->to(torch::kFloat64);
  return net;
}

struct Case {
  std::vector<int> batches;  // per rank
  bool divide_by_initial = true;
  bool own_group = false;   // SyncBatchNorm on a group of its own, else on DDP's
  int64_t shadow_rows = 0;  // the replayed batch's samples (what it computes counts nowhere)
};

// Rank r's batch k: 2 to 4 samples, inputs and output weights.
struct Batch {
  torch::Tensor x, g;
};
std::vector<std::vector<Batch>> make_data(const Case& c) {
  torch::manual_seed(5);
  std::vector<std::vector<Batch>> data(c.batches.size());
  for (size_t r = 0; r < c.batches.size(); ++r) {
    for (int k = 0; k < c.batches[r]; ++k) {
      const int64_t n = 2 + static_cast<int64_t>(r + k) % 3;
      data[r].push_back(
          {torch::randn({n, 4}, torch::kFloat64) + 1, torch::randn({n, 2}, torch::kFloat64)});
    }
  }
  return data;
}

torch::optim::SGD sgd(nn::Sequential& net) {
  return torch::optim::SGD(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
}

// One process, BatchNorm on each step's batches of the ranks that have one.
nn::Sequential reference(const Case& c, const std::vector<std::vector<Batch>>& data,
                         const nn::Sequential& initial) {
  auto net = std::dynamic_pointer_cast<nn::SequentialImpl>(initial->clone());
  nn::Sequential ref(net);
  auto opt = sgd(ref);
  const int world = static_cast<int>(c.batches.size());
  const int most = *std::max_element(c.batches.begin(), c.batches.end());
  for (int s = 0; s < most; ++s) {
    std::vector<torch::Tensor> xs, gs;
    for (int r = 0; r < world; ++r) {
      if (s >= c.batches[r]) continue;
      xs.push_back(data[r][s].x);
      gs.push_back(data[r][s].g);
    }
    const double divisor = c.divide_by_initial ? world : static_cast<double>(xs.size());
    opt.zero_grad();
    ((ref->forward(torch::cat(xs)) * torch::cat(gs)).sum() / divisor).backward();
    opt.step();
  }
  return ref;
}

void run(const Case& c) {
  const int world = static_cast<int>(c.batches.size());
  const auto data = make_data(c);
  torch::manual_seed(7);
  const nn::Sequential initial = bn_mlp();
  const nn::Sequential expected = reference(c, data, initial);

  spawn(world, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, world);
    auto bn_group =
        c.own_group ? make_group(c10::make_intrusive<c10d::PrefixStore>("bn", store), rank, world)
                    : pg;
    nn::Sequential net(std::dynamic_pointer_cast<nn::SequentialImpl>(initial->clone()));
    convert_sync_batchnorm(net.ptr(), bn_group);
    DistributedDataParallel model(net, DistributedDataParallelOptions().process_group(pg));
    model->set_join_shadow_batch(torch::ones({c.shadow_rows, 4}, torch::kFloat64));
    auto opt = sgd(net);
    {
      Join join({*model}, JoinOptions().divide_by_initial_world_size(c.divide_by_initial));
      for (const auto& batch : data[rank]) {
        opt.zero_grad();
        (model->forward(batch.x) * batch.g).sum().backward();
        opt.step();
      }
    }
    const auto got = net->named_parameters();
    for (const auto& item : expected->named_parameters()) {
      EXPECT_TRUE(torch::allclose(got[item.key()], item.value(), 0, 1e-10))
          << "rank " << rank << ": " << item.key() << "\n"
          << got[item.key()] << "\nexpected\n"
          << item.value();
    }
    const auto got_buffers = net->named_buffers();
    for (const auto& item : expected->named_buffers()) {
      EXPECT_TRUE(torch::allclose(got_buffers[item.key()].to(torch::kFloat64),
                                  item.value().to(torch::kFloat64), 0, 1e-10))
          << "rank " << rank << ": " << item.key();
    }
  });
}

TEST(JoinSyncBatchNorm, UnevenInputsTrainLikeOneProcessOnEachStepsBatches) {
  run({{3, 5, 7}});
  run({{3, 5, 7}, /*divide_by_initial=*/false});
}

TEST(JoinSyncBatchNorm, OnAGroupOfItsOwn) { run({{3, 5, 7}, true, /*own_group=*/true}); }

TEST(JoinSyncBatchNorm, AReplayedBatchWithSamplesAddsNothing) {
  run({{3, 5, 7}, true, false, /*shadow_rows=*/3});
}

TEST(JoinSyncBatchNorm, ARankWithoutAnyBatchReplaysFromTheStart) {
  run({{0, 2, 4}});
  run({{4, 1, 0, 2}, false, true});
}

// bn_mlp() with its BatchNorms synchronized over `pg`, inside DDP on `pg`.
DistributedDataParallel sync_bn_model(const ProcessGroupPtr& pg) {
  nn::Sequential net = bn_mlp();
  convert_sync_batchnorm(net.ptr(), pg);
  return DistributedDataParallel(net, DistributedDataParallelOptions().process_group(pg));
}

// Without a batch to replay, the ranks out of inputs would leave the
// others waiting in SyncBatchNorm's collectives: refused on every rank
// before any collective.
TEST(JoinSyncBatchNorm, AJoinWithoutAShadowBatchIsRefused) {
  spawn(2, [](int rank, StorePtr store) {
    DistributedDataParallel model = sync_bn_model(make_group(store, rank, 2));
    Raised r = raised<InvalidArgument>([&] { Join join({*model}); });
    EXPECT_TRUE(r) << r;
    EXPECT_EQ(r.context.operation, "Join") << r;
    EXPECT_EQ(r.context.rank, rank) << r;
    EXPECT_EQ(r.context.world_size, 2) << r;
    EXPECT_TRUE(r.mentions("'1'")) << r;                    // the SyncBatchNorm layer
    EXPECT_TRUE(r.mentions("set_join_shadow_batch")) << r;  // the call that provides a batch
    // Throwing on early termination shadows nothing: allowed.
    Join join({*model}, JoinOptions().throw_on_early_termination(true));
  });
}

// Inside a Join, a no_sync forward or one with grad disabled would issue
// SyncBatchNorm's collectives outside the replayed iterations: refused on
// every rank before any collective; in eval() mode nothing is issued.
TEST(JoinSyncBatchNorm, ForwardsNoReplayMatchesAreRefused) {
  spawn(2, [](int rank, StorePtr store) {
    DistributedDataParallel model = sync_bn_model(make_group(store, rank, 2));
    model->set_join_shadow_batch(torch::zeros({0, 4}, torch::kFloat64));
    const auto x = torch::ones({3, 4}, torch::kFloat64);
    Join join({*model});
    Raised r = raised<InvalidArgument>([&] { model->no_sync([&] { return model->forward(x); }); });
    EXPECT_TRUE(r) << r;
    EXPECT_EQ(r.context.operation, "Join") << r;
    EXPECT_EQ(r.context.rank, rank) << r;
    EXPECT_TRUE(r.mentions("'1'")) << r;  // the SyncBatchNorm layer in training mode
    r = raised<InvalidArgument>([&] {
      torch::NoGradGuard no_grad;
      model->forward(x);
    });
    EXPECT_TRUE(r) << r;
    EXPECT_EQ(r.context.operation, "Join") << r;
    EXPECT_EQ(r.context.rank, rank) << r;
    EXPECT_TRUE(r.mentions("'1'")) << r;
    model->module()->eval();
    {
      torch::NoGradGuard no_grad;
      model->forward(x);
    }
    model->module()->train();
    (model->forward(x) * 1.0).sum().backward();  // the ranks are still in step
  });
}

}  // namespace
}  // namespace ddp::testing
