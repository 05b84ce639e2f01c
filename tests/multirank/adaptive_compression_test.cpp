// The adaptive compression hook (include/ddp/hooks/adaptive_compression.h):
// its rule alone, its options, and DDP with it on threads as ranks: how it
// walks the ladder, what it sends, that rank 0's decision binds every rank,
// error feedback, a critical regime, options that differ, the timeline.
#include "spawn.h"

#include <ddp/ddp.h>

#include "hooks/adaptive_policy.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <array>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ddp::testing {
namespace {

using Kind = CompressionLevel::Kind;

TEST(AdaptivePolicy, CriticalGoesToTheFirstLevelSteadyOneLevelOn) {
  // A change of at least the threshold is critical.
  auto d = detail::next_level(2, 3, 10.0, 4.0, 0.5, false);
  EXPECT_TRUE(d.critical);
  EXPECT_EQ(d.level, 0u);
  EXPECT_DOUBLE_EQ(d.norm_change, 0.6);
  d = detail::next_level(1, 3, 10.0, 15.0, 0.5, false);
  EXPECT_TRUE(d.critical);
  EXPECT_EQ(d.level, 0u);
  // Below it: one level more compressed, and the last level stays.
  d = detail::next_level(0, 3, 10.0, 9.0, 0.5, false);
  EXPECT_FALSE(d.critical);
  EXPECT_EQ(d.level, 1u);
  EXPECT_EQ(detail::next_level(2, 3, 10.0, 9.0, 0.5, false).level, 2u);
  // Marked by the user: critical whatever the norms.
  d = detail::next_level(2, 3, 10.0, 10.0, 0.5, true);
  EXPECT_TRUE(d.critical);
  EXPECT_EQ(d.level, 0u);
  // From a zero norm: critical when something appears, steady otherwise.
  EXPECT_TRUE(detail::next_level(1, 3, 0.0, 1.0, 0.5, false).critical);
  EXPECT_EQ(detail::next_level(1, 3, 0.0, 0.0, 0.5, false).level, 2u);
}

TEST(AdaptiveOptions, OutOfRangeIsInvalidArgument) {
  using O = AdaptiveCompressionOptions;
  EXPECT_THROW(AdaptiveCompressionState(O().levels({})), InvalidArgument);
  EXPECT_THROW(AdaptiveCompressionState(O().levels({CompressionLevel::powerSGD(0)})),
               InvalidArgument);
  EXPECT_THROW(AdaptiveCompressionState(O().window(0)), InvalidArgument);
  EXPECT_THROW(AdaptiveCompressionState(O().critical_threshold(0)), InvalidArgument);
  EXPECT_THROW(AdaptiveCompressionState(O().min_compression_rate(-1)), InvalidArgument);
  AdaptiveCompressionState ok;
  ASSERT_EQ(ok.options().levels().size(), 3u);
  EXPECT_EQ(ok.options().levels()[0].kind, Kind::kFull);
  EXPECT_EQ(ok.options().levels()[2].name(), "powerSGD rank 4");
  EXPECT_EQ(ok.stats().sent_fraction(), 1);
}

// One weight matrix (6 x 8, no bias): a bucket that PowerSGD compresses.
// Its values are fixed (not drawn: rank threads share torch's generator).
torch::nn::Linear make_layer() {
  torch::nn::Linear layer(torch::nn::LinearOptions(8, 6).bias(false));
  torch::NoGradGuard no_grad;
  layer->weight.copy_(torch::cos(torch::arange(48, torch::kFloat).reshape({6, 8}) * 0.7) * 0.3);
  return layer;
}

// Rank r's batch; `scale` multiplies the loss (and so the gradient).
torch::Tensor loss_of(DistributedDataParallel& model, int rank, double scale) {
  auto x = torch::sin(torch::arange(32, torch::kFloat).reshape({4, 8}) * (rank + 1));
  return model->forward(x).pow(2).sum() * scale;
}

// The gradient DDP should give: the mean of the ranks' own.
torch::Tensor mean_gradient(int world, double scale) {
  auto layer = make_layer();
  torch::Tensor sum = torch::zeros({6, 8});
  for (int r = 0; r < world; ++r) {
    layer->zero_grad();
    auto x = torch::sin(torch::arange(32, torch::kFloat).reshape({4, 8}) * (r + 1));
    (layer->forward(x).pow(2).sum() * scale).backward();
    sum += layer->weight.grad();
  }
  return sum / world;
}

struct RankRun {
  AdaptiveCompressionStats stats;
  std::vector<torch::Tensor> gradients;  // one per iteration
};

// `iterations` backward passes (no optimizer step: the same gradient each
// time, times scales[i] when given), on `world` ranks.
std::vector<RankRun> train(int world, int iterations, const AdaptiveCompressionOptions& options,
                           const std::vector<double>& scales = {},
                           int mark_critical_before = -1) {
  std::vector<RankRun> runs(world);
  spawn(world, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, world);
    DistributedDataParallel model(make_layer(),
                                  DistributedDataParallelOptions().process_group(pg));
    auto state = model->register_comm_hook(
        AdaptiveCompressionState(AdaptiveCompressionOptions(options).process_group(pg)),
        adaptive_compression_hook);
    for (int i = 0; i < iterations; ++i) {
      if (i == mark_critical_before) state->mark_critical();
      model->zero_grad();
      loss_of(model, rank, scales.empty() ? 1.0 : scales[i]).backward();
      runs[rank].gradients.push_back(model->parameters()[0].grad().clone());
    }
    runs[rank].stats = state->stats();
  });
  return runs;
}

TEST(AdaptiveHook, SteadyGradientsWalkDownTheLadderOnEveryRank) {
  // Window 2: levels[0] for iterations 0-3, then one level per window.
  const auto options =
      AdaptiveCompressionOptions()
          .levels({CompressionLevel::full(), CompressionLevel::fp16(), CompressionLevel::powerSGD(1)})
          .window(2);
  const int iterations = 10;
  auto runs = train(2, iterations, options);
  const torch::Tensor expected = mean_gradient(2, 1.0);
  for (int rank = 0; rank < 2; ++rank) {
    const auto& s = runs[rank].stats;
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(s.iterations, iterations);
    ASSERT_EQ(s.switches.size(), 2u);
    EXPECT_EQ(s.switches[0].iteration, 4);
    EXPECT_EQ(s.switches[0].from, 0u);
    EXPECT_EQ(s.switches[0].to, 1u);
    EXPECT_FALSE(s.switches[0].critical);
    EXPECT_EQ(s.switches[1].iteration, 6);
    EXPECT_EQ(s.switches[1].to, 2u);
    EXPECT_EQ(s.reductions_per_level, (std::vector<int64_t>{4, 2, 4}));
    ASSERT_EQ(s.bucket_levels, (std::vector<size_t>{2}));
    // Bytes: 48 floats a reduction in full, 48 halves in fp16, and PowerSGD
    // rank 1 of a 6 x 8 matrix: P (6) and Q (8) floats.
    EXPECT_EQ(s.bytes_uncompressed, iterations * 48 * 4);
    EXPECT_EQ(s.bytes_sent, 4 * 48 * 4 + 2 * 48 * 2 + 4 * (6 + 8) * 4);
    // Full precision: DDP's average exactly; fp16: within its rounding.
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(runs[rank].gradients[i].equal(expected)) << i;
    for (int i = 4; i < 6; ++i) {
      EXPECT_TRUE(runs[rank].gradients[i].allclose(expected, 1e-3, 1e-3)) << i;
      EXPECT_FALSE(runs[rank].gradients[i].equal(expected)) << i;
    }
    // Every rank applies the same gradient at every level.
    for (int i = 0; i < iterations; ++i) {
      EXPECT_TRUE(runs[rank].gradients[i].equal(runs[0].gradients[i])) << i;
    }
  }
}

TEST(AdaptiveHook, ErrorFeedbackSendsWhatPowerSGDLost) {
  // A fixed PowerSGD rank 1 on a gradient of rank > 1: without error
  // feedback every step loses the same part; with it the lost part is sent
  // later, so the sum of the applied gradients approaches the true sum.
  auto relative_error_of_sum = [](bool feedback) {
    const int iterations = 24;
    auto runs = train(2, iterations,
                      AdaptiveCompressionOptions()
                          .levels({CompressionLevel::powerSGD(1)})
                          .window(100)
                          .error_feedback(feedback));
    torch::Tensor applied = torch::zeros({6, 8});
    for (const auto& g : runs[0].gradients) applied += g;
    const torch::Tensor truth = mean_gradient(2, 1.0) * iterations;
    return ((applied - truth).norm() / truth.norm()).item<double>();
  };
  const double with = relative_error_of_sum(true), without = relative_error_of_sum(false);
  EXPECT_GT(without, 0.01);  // rank 1 does lose something here
  EXPECT_LT(with, 0.5 * without) << "with " << with << ", without " << without;
}

TEST(AdaptiveHook, AnAbruptChangeIsCriticalAndMarkCriticalToo) {
  const auto options =
      AdaptiveCompressionOptions()
          .levels({CompressionLevel::full(), CompressionLevel::fp16(), CompressionLevel::bf16()})
          .window(2);
  // Steady until iteration 8, then the gradient is 10 times larger: the
  // window of iterations 8-9 differs from 6-7, judged at iteration 10.
  std::vector<double> scales(12, 1.0);
  for (int i = 8; i < 12; ++i) scales[i] = 10;
  auto runs = train(2, 12, options, scales);
  for (int rank = 0; rank < 2; ++rank) {
    const auto& switches = runs[rank].stats.switches;
    ASSERT_EQ(switches.size(), 3u) << "rank " << rank;
    EXPECT_EQ(switches[2].iteration, 10);
    EXPECT_TRUE(switches[2].critical);
    EXPECT_EQ(switches[2].to, 0u);
    EXPECT_NEAR(switches[2].norm_change, 9.0, 1e-3);  // |1 - 10| / 1, the same on every rank
  }
  // mark_critical() (on rank 0 and 1 alike) before iteration 9: the decision
  // at iteration 10 is critical although the gradients never change.
  runs = train(2, 12, options, {}, /*mark_critical_before=*/9);
  for (int rank = 0; rank < 2; ++rank) {
    const auto& switches = runs[rank].stats.switches;
    ASSERT_EQ(switches.size(), 3u) << "rank " << rank;
    EXPECT_EQ(switches[2].iteration, 10);
    EXPECT_TRUE(switches[2].critical);
    EXPECT_EQ(switches[2].norm_change, 0);
  }
}

TEST(AdaptiveHook, OptionsThatDifferAcrossRanksFailOnEveryRank) {
  std::array<std::string, 2> errors;
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    DistributedDataParallel model(make_layer(),
                                  DistributedDataParallelOptions().process_group(pg));
    auto options = AdaptiveCompressionOptions().process_group(pg).window(2).critical_threshold(
        rank == 0 ? 0.5 : 0.25);
    model->register_comm_hook(AdaptiveCompressionState(options), adaptive_compression_hook);
    try {
      for (int i = 0; i < 6; ++i) {
        model->zero_grad();
        loss_of(model, rank, 1.0).backward();
      }
      errors[rank] = "no error";
    } catch (const InvalidArgument&) {
      errors[rank] = "InvalidArgument";
    } catch (const std::exception& e) {
      errors[rank] = std::string("another error: ") + e.what();
    }
  });
  EXPECT_EQ(errors[0], "InvalidArgument");
  EXPECT_EQ(errors[1], "InvalidArgument");
}

TEST(AdaptiveHook, TheTimelineShowsEachRunAtALevel) {
  const std::string dir = ::testing::TempDir() + "adaptive_timeline_" + std::to_string(getpid());
  const std::string pattern = dir + ".rank{rank}.json";
  setenv("DDP_TIMELINE", pattern.c_str(), 1);
  train(2, 8,
        AdaptiveCompressionOptions()
            .levels({CompressionLevel::full(), CompressionLevel::fp16()})
            .window(2));
  unsetenv("DDP_TIMELINE");
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream file(dir + ".rank" + std::to_string(rank) + ".json");
    std::stringstream text;
    text << file.rdbuf();
    // The run at full precision ended with the switch at iteration 4.
    EXPECT_TRUE(contains(text.str(), "\"bucket 0: full\"")) << text.str().substr(0, 2000);
    EXPECT_TRUE(contains(text.str(), "\"compression\"")) << "rank " << rank;
  }
}

}  // namespace
}  // namespace ddp::testing
