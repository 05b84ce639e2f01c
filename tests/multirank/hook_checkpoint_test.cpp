// A DistributedDataParallel's communication hook in a checkpoint
// (checkpoint.h, comm_hook.h's HookStateDict), threads as ranks: a job with
// PowerSGD (error feedback and warm start on, layer-wise and batched), or
// with adaptive compression once it has moved down to PowerSGD, resumed
// from a checkpoint goes on bit-identically to the uninterrupted job;
// resumed without the hook's state (loaded into the plain module) it does
// not, which is what makes the first check able to fail; in another world
// size each rank's own part (error feedback) comes back empty.
#include "spawn.h"

#include <ddp/checkpoint.h>
#include <ddp/distributed_data_parallel.h>
#include <ddp/hooks/adaptive_compression.h>
#include <ddp/hooks/powersgd.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace ddp::testing {
namespace {

// Float64, the same values on every rank without drawing from a generator.
torch::nn::Sequential make_net() {
  torch::nn::Sequential net(torch::nn::Linear(12, 16), torch::nn::Tanh(), torch::nn::Linear(16, 10),
                            torch::nn::Tanh(), torch::nn::Linear(10, 4));
  net->to(torch::kDouble);
  torch::NoGradGuard no_grad;
  int i = 0;
  for (auto& p : net->parameters()) {
    p.copy_(torch::cos(torch::arange(p.numel(), torch::kDouble) * 0.37 * ++i).view_as(p) * 0.3);
  }
  return net;
}

// Every parameter in a bucket of its own: several buckets, rebuilt after
// the first iteration.
DistributedDataParallel wrap(torch::nn::Sequential net, ProcessGroupPtr pg) {
  return DistributedDataParallel(std::move(net), DistributedDataParallelOptions()
                                                     .process_group(std::move(pg))
                                                     .bucket_cap_mb(0.0001)
                                                     .first_bucket_cap_mb(0.0001));
}

PowerSGDState powersgd(ProcessGroupPtr pg) {
  return PowerSGDState(std::move(pg), /*matrix_approximation_rank=*/1,
                       /*start_powerSGD_iter=*/2);
}

// Step `s` of rank `rank`: its own batch, so that error feedback differs
// between the ranks.
void train_step(DistributedDataParallel& model, torch::optim::Optimizer& opt, int rank, int s) {
  auto x = torch::sin(torch::arange(96, torch::kDouble).view({8, 12}) * 0.1 * (rank + 1) + s);
  opt.zero_grad();
  model->forward(x).pow(2).sum().backward();
  opt.step();
}

std::vector<torch::Tensor> snapshot(DistributedDataParallel& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
  return out;
}

bool bitwise_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

torch::optim::SGD sgd(DistributedDataParallel& model) {
  return torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
}

class HookCheckpoint : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ddp-hook-checkpoint-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/run.ckpt";
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  // The layer-wise hook, or the batched one (the test's parameter).
  static FuturePtr hook(PowerSGDState& state, GradBucket& bucket) {
    return GetParam() ? batched_powerSGD_hook(state, bucket) : powerSGD_hook(state, bucket);
  }

  std::string dir_, path_;
};

constexpr int kSaveAt = 6, kAfter = 4;

TEST_P(HookCheckpoint, APowerSGDJobResumesBitIdenticallyOnlyWithItsHooksState) {
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    const auto options = CheckpointOptions().process_group(pg).rng_state(false);

    auto model = wrap(make_net(), pg);
    auto state = model->register_comm_hook(powersgd(pg), hook);
    auto opt = sgd(model);
    for (int s = 0; s < kSaveAt; ++s) train_step(model, opt, rank, s);
    ASSERT_FALSE(state->error_memory().empty()) << "PowerSGD has not started: nothing to test";
    save_checkpoint(path_, *model, opt, TrainingState{0, kSaveAt, 0, {}}, options);
    for (int s = kSaveAt; s < kSaveAt + kAfter; ++s) train_step(model, opt, rank, s);
    const auto uninterrupted = snapshot(model);

    auto resumed = wrap(make_net(), pg);
    auto resumed_state = resumed->register_comm_hook(powersgd(pg), hook);
    auto resumed_opt = sgd(resumed);
    ASSERT_TRUE(load_checkpoint(path_, *resumed, resumed_opt, options));
    EXPECT_EQ(resumed_state->iter(), kSaveAt);
    for (int s = kSaveAt; s < kSaveAt + kAfter; ++s) train_step(resumed, resumed_opt, rank, s);
    EXPECT_TRUE(bitwise_equal(snapshot(resumed), uninterrupted)) << "rank " << rank;

    // Loaded into the plain module before wrapping: the same parameters and
    // momentum, but a fresh hook state and buckets.
    auto net = make_net();
    auto plain_opt =
        torch::optim::SGD(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    ASSERT_TRUE(load_checkpoint(path_, *net, plain_opt, options));
    auto fresh = wrap(net, pg);
    fresh->register_comm_hook(powersgd(pg), hook);
    for (int s = kSaveAt; s < kSaveAt + kAfter; ++s) train_step(fresh, plain_opt, rank, s);
    EXPECT_FALSE(bitwise_equal(snapshot(fresh), uninterrupted))
        << "rank " << rank << ": the hook's state made no difference; the test proves nothing";
  });
}

TEST_P(HookCheckpoint, InAnotherWorldSizeEachRanksOwnPartStartsAfresh) {
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    auto model = wrap(make_net(), pg);
    model->register_comm_hook(powersgd(pg), hook);
    auto opt = sgd(model);
    for (int s = 0; s < kSaveAt; ++s) train_step(model, opt, rank, s);
    save_checkpoint(path_, *model, opt, TrainingState{0, kSaveAt, 0, {}},
                    CheckpointOptions().process_group(pg).rng_state(false));
  });
  spawn(1, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 1);
    auto model = wrap(make_net(), pg);
    auto state = model->register_comm_hook(powersgd(pg), hook);
    auto opt = sgd(model);
    ASSERT_TRUE(load_checkpoint(path_, *model, opt,
                                CheckpointOptions().process_group(pg).rng_state(false)));
    EXPECT_EQ(state->iter(), kSaveAt);
    EXPECT_FALSE(state->q_memory().empty()) << "the shared part (warm start) is back";
    EXPECT_TRUE(state->error_memory().empty()) << "the 2 ranks' error feedback is not this one's";
    train_step(model, opt, rank, kSaveAt);  // and it trains on
  });
}

// Full precision, fp16, then PowerSGD of rank 1, one level further each
// window of 2 iterations from the fourth (never critical).
AdaptiveCompressionState adaptive(ProcessGroupPtr pg) {
  return AdaptiveCompressionState(AdaptiveCompressionOptions()
                                      .process_group(std::move(pg))
                                      .levels({CompressionLevel::full(), CompressionLevel::fp16(),
                                               CompressionLevel::powerSGD(1)})
                                      .window(2)
                                      .critical_threshold(1e9));
}

TEST(AdaptiveHookCheckpoint, AnAdaptiveJobResumesBitIdenticallyOnlyWithItsHooksState) {
  char tmpl[] = "/tmp/ddp-hook-checkpoint-test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, path = dir + "/run.ckpt";
  constexpr int kAdaptiveSaveAt = 9;
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    const auto options = CheckpointOptions().process_group(pg).rng_state(false);

    auto model = wrap(make_net(), pg);
    auto state = model->register_comm_hook(adaptive(pg), adaptive_compression_hook);
    auto opt = sgd(model);
    for (int s = 0; s < kAdaptiveSaveAt; ++s) train_step(model, opt, rank, s);
    ASSERT_GT(state->stats().reductions_per_level.at(2), 0)
        << "no bucket reached PowerSGD before the save: nothing to test";
    save_checkpoint(path, *model, opt, TrainingState{0, kAdaptiveSaveAt, 0, {}}, options);
    for (int s = kAdaptiveSaveAt; s < kAdaptiveSaveAt + kAfter; ++s) {
      train_step(model, opt, rank, s);
    }
    const auto uninterrupted = snapshot(model);
    const auto uninterrupted_stats = state->stats();

    auto resumed = wrap(make_net(), pg);
    auto resumed_state = resumed->register_comm_hook(adaptive(pg), adaptive_compression_hook);
    auto resumed_opt = sgd(resumed);
    ASSERT_TRUE(load_checkpoint(path, *resumed, resumed_opt, options));
    for (int s = kAdaptiveSaveAt; s < kAdaptiveSaveAt + kAfter; ++s) {
      train_step(resumed, resumed_opt, rank, s);
    }
    EXPECT_TRUE(bitwise_equal(snapshot(resumed), uninterrupted)) << "rank " << rank;
    EXPECT_EQ(resumed_state->stats().bucket_levels, uninterrupted_stats.bucket_levels);
    EXPECT_EQ(resumed_state->stats().switches.size(), uninterrupted_stats.switches.size());

    auto net = make_net();
    auto plain_opt =
        torch::optim::SGD(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    ASSERT_TRUE(load_checkpoint(path, *net, plain_opt, options));
    auto fresh = wrap(net, pg);
    fresh->register_comm_hook(adaptive(pg), adaptive_compression_hook);
    for (int s = kAdaptiveSaveAt; s < kAdaptiveSaveAt + kAfter; ++s) {
      train_step(fresh, plain_opt, rank, s);
    }
    EXPECT_FALSE(bitwise_equal(snapshot(fresh), uninterrupted))
        << "rank " << rank << ": the hook's state made no difference; the test proves nothing";
  });
  std::system(("rm -rf '" + dir + "'").c_str());
}

INSTANTIATE_TEST_SUITE_P(Hooks, HookCheckpoint, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Batched" : "LayerWise");
                         });

}  // namespace
}  // namespace ddp::testing
