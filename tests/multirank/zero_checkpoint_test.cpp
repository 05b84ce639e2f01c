// ZeRO checkpoints across world sizes, and bad input on every rank.
#include "spawn.h"
#include "support/raised.h"

#include <ddp/ddp.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <sstream>

namespace ddp::testing {
namespace {

namespace optim = torch::optim;

std::vector<torch::Tensor> make_params() {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);  // ranks are threads
  std::vector<torch::Tensor> params;
  for (auto shape : std::vector<std::vector<int64_t>>{{24, 6}, {24}, {3, 24}, {3}, {5, 5}}) {
    params.push_back((at::randn(shape, gen, torch::kFloat64) * 0.3).requires_grad_());
  }
  return params;
}

void backward(std::vector<torch::Tensor>& params, int64_t step) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(200 + step);
  auto x = at::randn({7, 6}, gen, torch::kFloat64);
  for (auto& p : params) p.mutable_grad() = torch::Tensor();
  auto h = torch::tanh(torch::mm(x, params[0].t()) + params[1]);
  auto out = torch::mm(h, params[2].t()) + params[3] + params[4].square().sum();
  out.square().sum().backward();
}

// What torch::save writes of `opt`.
std::string saved(ZeroRedundancyOptimizer& opt) {
  std::ostringstream out;
  torch::save(opt, out);
  return out.str();
}

// torch::load of `checkpoint` (saved's bytes) into `opt`.
void load_saved(ZeroRedundancyOptimizer& opt, const std::string& checkpoint) {
  std::istringstream in(checkpoint);
  torch::load(opt, in);
}

// Adam for `first` steps on `from` ranks, a checkpoint, then `second` steps
// on `to` ranks from it: the same as `first + second` steps in one process.
TEST(ZeroCheckpoint, RoundTripAcrossWorldSizes) {
  const auto defaults = optim::AdamOptions(1e-2).amsgrad(true);
  const int first = 3, second = 2;
  auto want = make_params();
  {
    optim::Adam plain(want, defaults);
    for (int s = 0; s < first + second; ++s) {
      backward(want, s);
      plain.step();
    }
  }
  for (auto [from, to] : std::vector<std::pair<int, int>>{{2, 3}, {3, 1}, {4, 2}, {1, 4}, {2, 2}}) {
    std::string checkpoint;
    std::vector<torch::Tensor> trained;
    spawn(from, [&](int rank, StorePtr store) {
      auto pg = make_group(store, rank, from);
      auto params = make_params();
      ZeroRedundancyOptimizer opt(params, defaults, ZeroOptions().process_group(pg));
      for (int s = 0; s < first; ++s) {
        backward(params, s);
        opt.step();
      }
      const int to_rank = from - 1;
      opt.consolidate_state_dict(to_rank);
      if (rank != to_rank) {
        std::ostringstream ignored;
        EXPECT_THROW(torch::save(opt, ignored), InvalidArgument);
        return;
      }
      checkpoint = saved(opt);
      trained = params;
    });
    ASSERT_FALSE(checkpoint.empty());
    spawn(to, [&](int rank, StorePtr store) {
      auto pg = make_group(store, rank, to);
      auto params = make_params();
      {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < params.size(); ++i) params[i].copy_(trained[i]);
      }
      ZeroRedundancyOptimizer opt(params, optim::AdamOptions(0.5), ZeroOptions().process_group(pg));
      load_saved(opt, checkpoint);
      EXPECT_DOUBLE_EQ(opt.param_groups()[0].options().get_lr(), 1e-2);  // options restored too
      for (int s = first; s < first + second; ++s) {
        backward(params, s);
        opt.step();
      }
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_LE((params[i] - want[i]).abs().max().item<double>(), 1e-12)
            << from << " -> " << to << " ranks, rank " << rank << ", parameter #" << i;
      }
    });
  }
}

// Runs `body` on `world` ranks; every rank must throw InvalidArgument with
// the facts that `expect(rank, raised)` checks.
void expect_error_everywhere(int world, const std::function<void(int, ProcessGroupPtr)>& body,
                             const std::function<void(int, const Raised&)>& expect) {
  std::atomic<int> errors{0};
  spawn(world, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, world);
    Raised r = raised<InvalidArgument>([&] { body(rank, pg); });
    EXPECT_TRUE(r) << "rank " << rank << ": " << r;
    if (!r) return;
    EXPECT_TRUE(r.on(*pg)) << r;
    expect(rank, r);
    ++errors;
  });
  EXPECT_EQ(errors.load(), world);
}

// expect_error_everywhere's check of a checkpoint load refused for naming
// `theirs` (the checkpoint's) where this optimizer has `ours`.
std::function<void(int, const Raised&)> load_refused(const std::string& theirs,
                                                     const std::string& ours) {
  return [theirs, ours](int, const Raised& r) {
    EXPECT_EQ(r.context.operation, "ZeroRedundancyOptimizer::load") << r;
    EXPECT_TRUE(r.mentions(theirs)) << r;
    EXPECT_TRUE(r.mentions(ours)) << r;
  };
}

TEST(ZeroErrors, DifferentOptimizersAcrossRanks) {
  expect_error_everywhere(
      3,
      [](int rank, ProcessGroupPtr pg) {
        auto params = make_params();
        const ZeroOptions o = ZeroOptions().process_group(pg);
        if (rank == 2) {
          ZeroRedundancyOptimizer opt(params, optim::SGDOptions(0.1), o);
        } else {
          ZeroRedundancyOptimizer opt(params, optim::AdamOptions(0.1), o);
        }
      },
      [](int, const Raised& r) {
        EXPECT_EQ(r.context.operation, "ZeroRedundancyOptimizer") << r;
        EXPECT_EQ(r.context.peers, (std::vector<int>{0, 2})) << r;
        EXPECT_TRUE(r.mentions("SGD")) << r;   // rank 2's optimizer
        EXPECT_TRUE(r.mentions("Adam")) << r;  // rank 0's
      });
}

TEST(ZeroErrors, DifferentParametersAcrossRanks) {
  expect_error_everywhere(
      2,
      [](int rank, ProcessGroupPtr pg) {
        auto params = make_params();
        if (rank == 1) params[3] = torch::zeros({4}, torch::kFloat64).requires_grad_();
        ZeroRedundancyOptimizer opt(params, optim::SGDOptions(0.1),
                                    ZeroOptions().process_group(pg));
      },
      [](int, const Raised& r) {
        EXPECT_EQ(r.context.operation, "ZeroRedundancyOptimizer") << r;
        EXPECT_EQ(r.context.peers, (std::vector<int>{0, 1})) << r;
        EXPECT_TRUE(r.mentions("#3")) << r;      // the parameter that differs
        EXPECT_TRUE(r.mentions("[4]")) << r;     // its shape on rank 1
        EXPECT_TRUE(r.mentions("[3]")) << r;     // and on rank 0
        EXPECT_TRUE(r.mentions("Double")) << r;  // its dtype
      });
  expect_error_everywhere(
      2,
      [](int rank, ProcessGroupPtr pg) {
        auto params = make_params();
        if (rank == 0) params.pop_back();
        ZeroRedundancyOptimizer opt(params, optim::SGDOptions(0.1),
                                    ZeroOptions().process_group(pg));
      },
      [](int, const Raised& r) {
        EXPECT_EQ(r.context.operation, "ZeroRedundancyOptimizer") << r;
        EXPECT_EQ(r.context.peers, (std::vector<int>{0, 1})) << r;
        EXPECT_TRUE(r.mentions(" 5 ")) << r;  // rank 1's count of parameters
        EXPECT_TRUE(r.mentions(" 4 ")) << r;  // rank 0's
      });
}

TEST(ZeroErrors, ParameterTwiceOrNotALeafIsRefusedOnEveryRank) {
  expect_error_everywhere(
      3,
      [](int rank, ProcessGroupPtr pg) {
        auto params = make_params();
        std::vector<optim::OptimizerParamGroup> groups;
        groups.emplace_back(params);
        groups.emplace_back(std::vector<torch::Tensor>{params[1]});
        if (rank != 1) groups.pop_back();
        ZeroRedundancyOptimizer opt(groups, optim::SGDOptions(0.1),
                                    ZeroOptions().process_group(pg));
      },
      [](int rank, const Raised& r) {
        EXPECT_EQ(r.context.operation, "ZeroRedundancyOptimizer") << r;
        if (rank == 1) {  // its own error: parameter #5 is #1 again
          EXPECT_TRUE(r.context.peers.empty()) << r;
          EXPECT_TRUE(r.mentions("#5")) << r;
          EXPECT_TRUE(r.mentions("#1")) << r;
        } else {  // rank 1 refused its parameters
          EXPECT_EQ(r.context.peers, std::vector<int>{1}) << r;
        }
      });
}

TEST(ZeroErrors, CheckpointOfAnotherOptimizerOrModel) {
  std::string checkpoint;
  spawn(1, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 1);
    auto params = make_params();
    ZeroRedundancyOptimizer opt(params, optim::SGDOptions(0.1).momentum(0.9),
                                ZeroOptions().process_group(pg));
    backward(params, 0);
    opt.step();
    opt.consolidate_state_dict(0);
    opt.step();
    std::ostringstream stale;
    Raised r = raised<InvalidArgument>([&] { torch::save(opt, stale); });
    EXPECT_TRUE(r) << "a state consolidated before the last step was saved: " << r;
    EXPECT_EQ(r.context.operation, "ZeroRedundancyOptimizer::save") << r;
    EXPECT_EQ(r.context.rank, 0) << r;  // the rank it was consolidated on
    opt.consolidate_state_dict(0);
    checkpoint = saved(opt);
  });
  expect_error_everywhere(
      2,
      [&](int, ProcessGroupPtr pg) {
        auto params = make_params();
        ZeroRedundancyOptimizer opt(params, optim::AdamOptions(0.1),
                                    ZeroOptions().process_group(pg));
        load_saved(opt, checkpoint);
      },
      load_refused("SGD", "Adam"));  // the optimizers
  expect_error_everywhere(
      2,
      [&](int, ProcessGroupPtr pg) {
        auto params = make_params();
        params.pop_back();
        ZeroRedundancyOptimizer opt(params, optim::SGDOptions(0.1),
                                    ZeroOptions().process_group(pg));
        load_saved(opt, checkpoint);
      },
      load_refused("[5]", "[4]"));  // the groups' sizes
}

}  // namespace
}  // namespace ddp::testing
