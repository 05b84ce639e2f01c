// A DistributedDataParallel's communication hook in a checkpoint
// (checkpoint.h, comm_hook.h's HookStateDict), threads as ranks: a job with
// PowerSGD (error feedback and warm start on, layer-wise and batched), or
// with adaptive compression once it has moved down to PowerSGD, resumed
// from a checkpoint goes on bit-identically to the uninterrupted job;
// resumed without the hook's state (loaded into the plain module) it does
// not, which is what makes the first check able to fail; in another world
// size each rank's own part (error feedback) comes back empty.
#include "spawn.h"
#include "support/bitwise.h"
#include "support/scratch_dir.h"

#include <ddp/checkpoint.h>
#include <ddp/distributed_data_parallel.h>
#include <ddp/hooks/adaptive_compression.h>
#include <ddp/hooks/powersgd.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

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

torch::optim::SGD sgd(DistributedDataParallel& model) {
  return torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
}

// One rank's part of a job with the hook `register_hook` registers (it
// returns the state): `save_at` steps, a checkpoint at `path`, kAfter more.
// Then the same kAfter steps twice from the checkpoint: loaded into a DDP
// with a fresh hook (`resumed`), and loaded into the plain module that a
// DDP with a fresh hook then wraps (`without_hook_state`: fresh hook state
// and buckets).
template <typename State>
struct ResumedJob {
  std::shared_ptr<State> state, resumed_state;
  std::vector<torch::Tensor> uninterrupted, resumed, without_hook_state;
};

constexpr int kAfter = 4;

template <typename Register>
auto train_save_resume(const std::string& path, ProcessGroupPtr pg, int rank, int save_at,
                       Register register_hook) {
  const auto options = CheckpointOptions().process_group(pg).rng_state(false);
  auto model = wrap(make_net(), pg);
  ResumedJob<typename decltype(register_hook(model))::element_type> job;
  job.state = register_hook(model);
  auto opt = sgd(model);
  for (int s = 0; s < save_at; ++s) train_step(model, opt, rank, s);
  save_checkpoint(path, *model, opt, TrainingState{0, save_at, 0, {}}, options);
  for (int s = save_at; s < save_at + kAfter; ++s) train_step(model, opt, rank, s);
  job.uninterrupted = snapshot(model);

  auto resumed = wrap(make_net(), pg);
  job.resumed_state = register_hook(resumed);
  auto resumed_opt = sgd(resumed);
  EXPECT_TRUE(load_checkpoint(path, *resumed, resumed_opt, options));
  for (int s = save_at; s < save_at + kAfter; ++s) train_step(resumed, resumed_opt, rank, s);
  job.resumed = snapshot(resumed);

  auto net = make_net();
  auto plain_opt =
      torch::optim::SGD(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  EXPECT_TRUE(load_checkpoint(path, *net, plain_opt, options));
  auto fresh = wrap(net, pg);
  register_hook(fresh);
  for (int s = save_at; s < save_at + kAfter; ++s) train_step(fresh, plain_opt, rank, s);
  job.without_hook_state = snapshot(fresh);
  return job;
}

class HookCheckpoint : public ::testing::TestWithParam<bool> {
 protected:
  // The layer-wise hook, or the batched one (the test's parameter).
  static FuturePtr hook(PowerSGDState& state, GradBucket& bucket) {
    return GetParam() ? batched_powerSGD_hook(state, bucket) : powerSGD_hook(state, bucket);
  }

  const ScratchDir scratch_{"ddp-hook-checkpoint-test"};
  const std::string path_ = scratch_.path() + "/run.ckpt";
};

constexpr int kSaveAt = 6;

TEST_P(HookCheckpoint, APowerSGDJobResumesBitIdenticallyOnlyWithItsHooksState) {
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    auto job = train_save_resume(path_, pg, rank, kSaveAt, [&](DistributedDataParallel& model) {
      return model->register_comm_hook(powersgd(pg), hook);
    });
    EXPECT_FALSE(job.state->error_memory().empty()) << "PowerSGD never ran: nothing to test";
    EXPECT_EQ(job.resumed_state->iter(), job.state->iter());
    EXPECT_TRUE(bitwise_equal(job.resumed, job.uninterrupted)) << "rank " << rank;
    EXPECT_FALSE(bitwise_equal(job.without_hook_state, job.uninterrupted))
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
  const ScratchDir scratch("ddp-hook-checkpoint-test");
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    // Saved at step 9: PowerSGD from the sixth iteration on.
    auto job = train_save_resume(
        scratch.path() + "/run.ckpt", pg, rank, 9, [&](DistributedDataParallel& m) {
          return m->register_comm_hook(adaptive(pg), adaptive_compression_hook);
        });
    const auto stats = job.state->stats();
    ASSERT_GT(stats.switches.size(), 1u) << "the buckets did not move down the ladder";
    EXPECT_LT(stats.switches.back().iteration, 9) << "PowerSGD came only after the save";
    EXPECT_TRUE(bitwise_equal(job.resumed, job.uninterrupted)) << "rank " << rank;
    EXPECT_EQ(job.resumed_state->stats().bucket_levels, stats.bucket_levels);
    EXPECT_FALSE(bitwise_equal(job.without_hook_state, job.uninterrupted))
        << "rank " << rank << ": the hook's state made no difference; the test proves nothing";
  });
}

INSTANTIATE_TEST_SUITE_P(Hooks, HookCheckpoint, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Batched" : "LayerWise");
                         });

}  // namespace
}  // namespace ddp::testing
