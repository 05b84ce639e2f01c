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

#include <algorithm>
#include <array>
#include <functional>
#include <utility>
#include <cstdio>
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

// A 6 x 8 weight matrix (no bias), a bucket that PowerSGD compresses, and
// with `layers` 2 a 5 x 6 one after it. Values fixed, not drawn: rank
// threads share torch's generator.
torch::nn::Sequential make_model(int layers) {
  torch::nn::Sequential model(torch::nn::Linear(torch::nn::LinearOptions(8, 6).bias(false)));
  if (layers == 2) model->push_back(torch::nn::Linear(torch::nn::LinearOptions(6, 5).bias(false)));
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) {
    p.copy_(torch::cos(torch::arange(p.numel(), torch::kFloat).reshape(p.sizes()) * 0.7) * 0.3);
  }
  return model;
}

torch::Tensor input(int rank) {
  return torch::sin(torch::arange(32, torch::kFloat).reshape({4, 8}) * (rank + 1));
}

// The gradients DDP should give: the mean of the ranks' own.
std::vector<torch::Tensor> mean_gradients(int world, int layers) {
  auto model = make_model(layers);
  for (int r = 0; r < world; ++r) model->forward(input(r)).pow(2).sum().backward();
  std::vector<torch::Tensor> means;
  for (auto& p : model->parameters()) means.push_back(p.grad() / world);
  return means;
}

struct Plan {
  int layers = 1;
  // What rank r's loss (and so its gradient) is multiplied by at iteration i.
  std::function<double(int rank, int i)> scale = [](int, int) { return 1.0; };
  int mark_critical_before = -1;  // the iteration before which...
  int mark_critical_rank = -1;    // ...this rank (-1: every rank) calls mark_critical()
};

struct RankRun {
  AdaptiveCompressionStats stats;
  std::vector<std::vector<torch::Tensor>> gradients;  // per iteration, per parameter
};

// `iterations` backward passes on `world` ranks, no optimizer step: the same
// gradients each time but for the plan's scales. With 2 layers a bucket per
// parameter.
std::vector<RankRun> train(int world, int iterations, const AdaptiveCompressionOptions& options,
                           const Plan& plan = {}) {
  std::vector<RankRun> runs(world);
  spawn(world, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, world);
    auto ddp_options = DistributedDataParallelOptions().process_group(pg);
    if (plan.layers == 2) ddp_options.bucket_cap_mb(1e-4).first_bucket_cap_mb(1e-4);
    DistributedDataParallel model(make_model(plan.layers), ddp_options);
    auto state = model->register_comm_hook(
        AdaptiveCompressionState(AdaptiveCompressionOptions(options).process_group(pg)),
        adaptive_compression_hook);
    for (int i = 0; i < iterations; ++i) {
      if (i == plan.mark_critical_before &&
          (plan.mark_critical_rank < 0 || plan.mark_critical_rank == rank)) {
        state->mark_critical();
      }
      model->zero_grad();
      (model->forward(input(rank)).pow(2).sum() * plan.scale(rank, i)).backward();
      runs[rank].gradients.emplace_back();
      for (auto& p : model->parameters()) runs[rank].gradients.back().push_back(p.grad().clone());
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
  const torch::Tensor expected = mean_gradients(2, 1)[0];
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
    // Bytes: 48 floats a reduction in full, 48 halves in fp16, PowerSGD
    // rank 1 of a 6 x 8 matrix: P (6) and Q (8) floats; the options' check
    // (2 doubles) and the decisions at iterations 4, 6 and 8 (3 doubles).
    EXPECT_EQ(s.bytes_uncompressed, iterations * 48 * 4);
    EXPECT_EQ(s.bytes_sent, 4 * 48 * 4 + 2 * 48 * 2 + 4 * (6 + 8) * 4 + 2 * 8 + 3 * 3 * 8);
    // Full precision: DDP's average exactly; fp16: within its rounding.
    const auto& g = runs[rank].gradients;
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(g[i][0].equal(expected)) << i;
    for (int i = 4; i < 6; ++i) {
      EXPECT_TRUE(g[i][0].allclose(expected, 1e-3, 1e-3)) << i;
      EXPECT_FALSE(g[i][0].equal(expected)) << i;
    }
    // Every rank applies the same gradient at every level.
    for (int i = 0; i < iterations; ++i) EXPECT_TRUE(g[i][0].equal(runs[0].gradients[i][0])) << i;
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
    for (const auto& g : runs[0].gradients) applied += g[0];
    const torch::Tensor truth = mean_gradients(2, 1)[0] * iterations;
    return ((applied - truth).norm() / truth.norm()).item<double>();
  };
  const double with = relative_error_of_sum(true), without = relative_error_of_sum(false);
  EXPECT_GT(without, 0.01);  // rank 1 does lose something here
  EXPECT_LT(with, 0.5 * without) << "with " << with << ", without " << without;
}

// Full, fp16, bf16; windows of 2: switches at iterations 4 and 6 while steady.
AdaptiveCompressionOptions three_levels_in_windows_of_two() {
  return AdaptiveCompressionOptions()
      .levels({CompressionLevel::full(), CompressionLevel::fp16(), CompressionLevel::bf16()})
      .window(2);
}

// Every rank saw the steady walk (switches at 4 and 6), then a critical
// decision at iteration 10 back to the first level, with rank 0's change
// (within `tolerance`; 0: exactly).
void expect_critical_at_iteration_10(const std::vector<RankRun>& runs, double norm_change,
                                     double tolerance) {
  for (size_t rank = 0; rank < runs.size(); ++rank) {
    const auto& switches = runs[rank].stats.switches;
    ASSERT_EQ(switches.size(), 3u) << "rank " << rank;
    EXPECT_EQ(switches[2].iteration, 10) << "rank " << rank;
    EXPECT_TRUE(switches[2].critical) << "rank " << rank;
    EXPECT_EQ(switches[2].to, 0u) << "rank " << rank;
    EXPECT_NEAR(switches[2].norm_change, norm_change, tolerance) << "rank " << rank;
  }
}

TEST(AdaptiveHook, RankZerosAbruptChangeIsCriticalForEveryRank) {
  const auto options = three_levels_in_windows_of_two();
  // Steady until iteration 8, then rank 0's gradient is 10 times larger: the
  // window of iterations 8-9 differs from 6-7, judged at iteration 10. Rank 0
  // decides: every rank switches with it.
  Plan plan;
  plan.scale = [](int rank, int i) { return rank == 0 && i >= 8 ? 10.0 : 1.0; };
  auto runs = train(2, 12, options, plan);
  expect_critical_at_iteration_10(runs, 9.0, 1e-3);  // |1 - 10| / 1, the same on every rank
  // The same change on rank 1 alone moves nobody: rank 0 saw no change.
  plan.scale = [](int rank, int i) { return rank == 1 && i >= 8 ? 10.0 : 1.0; };
  runs = train(2, 12, options, plan);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(runs[rank].stats.switches.size(), 2u) << "rank " << rank;
    EXPECT_EQ(runs[rank].stats.bucket_levels, (std::vector<size_t>{2})) << "rank " << rank;
  }
}

TEST(AdaptiveHook, MarkCriticalOnRankZeroMakesTheNextDecisionCritical) {
  const auto options = three_levels_in_windows_of_two();
  // Before iteration 9, on rank 0 only: the decision at iteration 10 is
  // critical on both ranks although the gradients never change.
  Plan plan;
  plan.mark_critical_before = 9;
  plan.mark_critical_rank = 0;
  auto runs = train(2, 12, options, plan);
  expect_critical_at_iteration_10(runs, 0.0, 0.0);
  // On rank 1 only: it does not decide, so nothing happens.
  plan.mark_critical_rank = 1;
  runs = train(2, 12, options, plan);
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(runs[rank].stats.switches.size(), 2u);
  // Marked during the first windows, which are not judged: kept for the
  // first judged decision (iteration 4), which is then critical.
  plan.mark_critical_before = 1;
  plan.mark_critical_rank = 0;
  runs = train(2, 6, options, plan);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(runs[rank].stats.switches.empty()) << "rank " << rank;  // critical: stays on 0
    EXPECT_EQ(runs[rank].stats.reductions_per_level, (std::vector<int64_t>{6, 0, 0}));
  }
}

TEST(AdaptiveHook, EveryBucketWalksItsOwnLadder) {
  // Two parameters in two buckets (after DDP's rebuild): each bucket is
  // decided on its own, both at the same iterations here.
  const auto options =
      AdaptiveCompressionOptions()
          .levels({CompressionLevel::full(), CompressionLevel::fp16(), CompressionLevel::powerSGD(1)})
          .window(2);
  Plan plan;
  plan.layers = 2;
  auto runs = train(2, 8, options, plan);
  const auto expected = mean_gradients(2, 2);
  for (int rank = 0; rank < 2; ++rank) {
    const auto& s = runs[rank].stats;
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(s.bucket_levels, (std::vector<size_t>{2, 2}));
    ASSERT_EQ(s.switches.size(), 4u);  // two buckets, at iterations 4 and 6
    std::vector<size_t> buckets;
    for (const auto& change : s.switches) buckets.push_back(change.bucket);
    std::sort(buckets.begin(), buckets.end());
    EXPECT_EQ(buckets, (std::vector<size_t>{0, 0, 1, 1}));
    EXPECT_EQ(s.bytes_uncompressed, 8 * (48 + 30) * 4);
    for (int i = 0; i < 4; ++i) {
      EXPECT_TRUE(runs[rank].gradients[i][0].equal(expected[0])) << i;
      EXPECT_TRUE(runs[rank].gradients[i][1].equal(expected[1])) << i;
    }
    for (int i = 0; i < 8; ++i) {
      for (int p = 0; p < 2; ++p) {
        EXPECT_TRUE(runs[rank].gradients[i][p].equal(runs[0].gradients[i][p])) << i << " " << p;
      }
    }
  }
}

TEST(AdaptiveHook, OptionsThatDifferAcrossRanksFailOnEveryRank) {
  std::array<std::string, 2> errors;
  std::array<int, 2> failed_at{-1, -1};
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    DistributedDataParallel model(make_model(1),
                                  DistributedDataParallelOptions().process_group(pg));
    // A window that differs would pair one rank's decision with the other's
    // bucket: the options are checked before the first collective.
    auto options = AdaptiveCompressionOptions().process_group(pg).window(rank == 0 ? 2 : 3);
    model->register_comm_hook(AdaptiveCompressionState(options), adaptive_compression_hook);
    try {
      for (int i = 0; i < 6; ++i) {
        failed_at[rank] = i;
        model->zero_grad();
        model->forward(input(rank)).pow(2).sum().backward();
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
  EXPECT_EQ(failed_at, (std::array<int, 2>{0, 0}));  // in the first backward
}

TEST(AdaptiveHook, TheTimelineShowsEachRunAtALevel) {
  const std::string dir = ::testing::TempDir() + "adaptive_timeline_" + std::to_string(getpid());
  const std::string pattern = dir + ".rank{rank}.json";
  setenv("DDP_TIMELINE", pattern.c_str(), 1);
  train(2, 8, three_levels_in_windows_of_two());
  unsetenv("DDP_TIMELINE");
  for (int rank = 0; rank < 2; ++rank) {
    const std::string path = dir + ".rank" + std::to_string(rank) + ".json";
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    std::remove(path.c_str());
    // Full precision from iteration 0 to the switch at 4; fp16 from 4 to 6.
    for (const auto& [name, from] : {std::pair{"bucket 0: full", 0}, {"bucket 0: fp16", 4}}) {
      const size_t at = text.str().find(std::string("\"") + name + "\"");
      ASSERT_NE(at, std::string::npos) << "rank " << rank << ": no " << name;
      const std::string event = text.str().substr(at, text.str().find('}', at) - at);
      EXPECT_TRUE(contains(event, "\"compression\"")) << event;
      EXPECT_TRUE(contains(event, "\"iteration\":" + std::to_string(from))) << event;
    }
  }
}

}  // namespace
}  // namespace ddp::testing
