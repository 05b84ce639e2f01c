// Join: ranks with different numbers of batches train to the
// parameters of one process that sees the same samples with the matching
// divisor; threads as ranks.
#include "spawn.h"
#include "support/raised.h"

#include <ddp/ddp.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace ddp::testing {
namespace {

// Two layers and a side branch that some batches skip (find_unused_parameters).
struct NetImpl : torch::nn::Module {
  NetImpl() {
    a = register_module("a", torch::nn::Linear(4, 3));
    b = register_module("b", torch::nn::Linear(3, 1));
    side = register_module("side", torch::nn::Linear(4, 1));
    to(torch::kDouble);
  }
  torch::Tensor forward(torch::Tensor x, int64_t use_side) {
    torch::Tensor y = b(torch::tanh(a(x)));
    return use_side ? y + side(x) : y;
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, side{nullptr};
};
TORCH_MODULE(Net);

struct Sample {
  torch::Tensor x, y;
  int64_t use_side;
};

// Rank r's micro-batch k: the same on every run.
Sample sample(int r, int k, bool vary_graph) {
  auto t = torch::arange(8, torch::kDouble).reshape({2, 4});
  return {torch::sin(t * (r + 1) + k), torch::cos(t.sum(1, true) + r * 3 + k),
          vary_graph ? (r + k) % 2 : 1};
}

torch::Tensor loss_of(Net& net, const Sample& s) {
  return torch::mse_loss(net->forward(s.x, s.use_side), s.y);
}

struct Case {
  std::vector<int> batches;  // micro-batches per rank
  bool divide_by_initial = true;
  bool find_unused = false;
  int accumulate = 1;  // micro-batches per synchronized step (no_sync between)
  bool hook = false;
  int epochs = 1;        // a Join each; with an OptimizerJoinable from the second on
  bool zero = false;     // a ZeroRedundancyOptimizer (listed in the Join) instead of SGD
  bool overlap = false;  // ... with overlap_with_ddp
};

// Which micro-batches each rank's synchronized steps cover: groups of
// `accumulate`, the last group possibly shorter.
std::vector<std::vector<int>> steps_of(int batches, int accumulate) {
  std::vector<std::vector<int>> steps;
  for (int k = 0; k < batches; ++k) {
    if (k % accumulate == 0) steps.emplace_back();
    steps.back().push_back(k);
  }
  return steps;
}

// One process, every rank's samples: step s sums the losses of the ranks
// that have a step s and divides by the world size or by their number.
std::vector<torch::Tensor> reference(const Case& c, const std::vector<torch::Tensor>& initial) {
  Net net;
  auto params = net->parameters();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) params[i].copy_(initial[i]);
  }
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.1).momentum(0.9));
  const int world = static_cast<int>(c.batches.size());
  const int most = *std::max_element(c.batches.begin(), c.batches.end());
  for (int epoch = 0; epoch < c.epochs; ++epoch) {
    for (int s = 0;; ++s) {
      std::vector<int> contributing;
      for (int r = 0; r < world; ++r) {
        if (static_cast<int>(steps_of(c.batches[r], c.accumulate).size()) > s)
          contributing.push_back(r);
      }
      if (contributing.empty() || s > most) break;
      opt.zero_grad();
      torch::Tensor total = torch::zeros({}, torch::kDouble);
      for (int r : contributing) {
        const auto steps = steps_of(c.batches[r], c.accumulate);
        for (int k : steps[s]) {
          total = total + loss_of(net, sample(r, 100 * epoch + k, c.find_unused));
        }
      }
      const double divisor = c.divide_by_initial ? world : static_cast<double>(contributing.size());
      (total / divisor).backward();
      opt.step();
    }
  }
  std::vector<torch::Tensor> out;
  for (auto& p : params) out.push_back(p.detach().clone());
  return out;
}

void run(const Case& c) {
  const int world = static_cast<int>(c.batches.size());
  spawn(world, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, world);
    DistributedDataParallel model(
        Net(),
        DistributedDataParallelOptions().process_group(pg).find_unused_parameters(c.find_unused));
    if (c.hook) model->register_comm_hook(pg, allreduce_hook);
    std::vector<torch::Tensor> initial;
    for (auto& p : model->parameters()) initial.push_back(p.detach().clone());
    const auto sgd = torch::optim::SGDOptions(0.1).momentum(0.9);
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    ZeroRedundancyOptimizer* zero = nullptr;
    if (c.zero) {
      optimizer = std::make_unique<ZeroRedundancyOptimizer>(
          model->parameters(), sgd, ZeroOptions().process_group(pg).overlap_with_ddp(c.overlap));
      zero = static_cast<ZeroRedundancyOptimizer*>(optimizer.get());
      if (c.overlap) model->register_comm_hook(zero, zero_hook);
    } else {
      optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), sgd);
    }
    torch::optim::Optimizer& opt = *optimizer;
    OptimizerJoinable joinable_opt(opt, pg);
    for (int epoch = 0; epoch < c.epochs; ++epoch) {
      std::vector<std::reference_wrapper<Joinable>> joinables{*model};
      if (zero) {
        joinables.push_back(*zero);  // its shard steps while it shadows
      } else if (c.epochs > 1) {
        joinables.push_back(joinable_opt);
      }
      Join join(joinables, JoinOptions().divide_by_initial_world_size(c.divide_by_initial));
      for (const auto& step : steps_of(c.batches[rank], c.accumulate)) {
        opt.zero_grad();
        for (int k : step) {
          const bool last = k == step.back();
          Sample s = sample(rank, 100 * epoch + k, c.find_unused);
          auto micro = [&] { torch::mse_loss(model->forward(s.x, s.use_side), s.y).backward(); };
          if (last) {
            micro();
          } else {
            model->no_sync(micro);
          }
        }
        opt.step();
      }
    }
    auto expected = reference(c, initial);
    auto params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::allclose(params[i], expected[i], 1e-12, 1e-12))
          << "rank " << rank << " parameter " << i << ":\n"
          << params[i] << "\nexpected\n"
          << expected[i];
    }
  });
}

TEST(Join, UnevenInputsTrainLikeOneProcessDividedByTheInitialWorldSize) { run({{3, 5, 7}}); }

TEST(Join, UnevenInputsDividedByTheRanksThatContributed) {
  run({{3, 5, 7}, /*divide_by_initial=*/false});
}

TEST(Join, WithFindUnusedParameters) {
  run({{3, 5, 7}, true, /*find_unused=*/true});
  run({{3, 5, 7}, false, /*find_unused=*/true});
}

TEST(Join, WithNoSync) {
  run({{3, 5, 7}, true, false, /*accumulate=*/2});
  run({{3, 5, 7}, false, true, /*accumulate=*/2});
}

// Momentum across epochs: the ranks that finished early take the state of
// the last one (OptimizerJoinable), so the next epoch starts in step.
TEST(Join, AnOptimizerJoinableKeepsMomentumInStepAcrossEpochs) {
  Case c{{3, 5, 7}};
  c.epochs = 3;
  run(c);
}

TEST(Join, WithACommHook) { run({{3, 5, 7}, true, false, 1, /*hook=*/true}); }

// A rank out of inputs still owns its shard: it steps it with the averaged
// gradients its shadow iteration got, and sends it to the others.
TEST(Join, AZeroRedundancyOptimizerStepsItsShardWhileItsRankShadows) {
  for (bool overlap : {false, true}) {
    Case c{{3, 5, 7}};
    c.zero = true;
    c.overlap = overlap;
    c.epochs = 2;
    run(c);
    c = Case{{0, 2, 4, 6}};
    c.zero = true;
    c.overlap = overlap;
    run(c);
  }
  Case c{{3, 5, 7}, /*divide_by_initial=*/false};
  c.zero = true;
  run(c);
}

// With find_unused_parameters, a parameter that no training rank uses in a
// step gets no gradient on them (zero_grad freed it); the shard owner that
// joined must not step it with the stale gradient its last own step left.
// (overlap_with_ddp takes no find_unused_parameters: docs/ddp.md, "ZeRO".)
TEST(Join, AJoinedZeroShardOwnerStepsOnlyWhatTheTrainingRanksStep) {
  Case c{{3, 5, 7}, true, /*find_unused=*/true};
  c.zero = true;
  run(c);
  c = Case{{1, 4, 6, 2}, true, /*find_unused=*/true};
  c.zero = true;
  run(c);
}

// A rank with no batch at all shadows from the first iteration, through
// the bucket rebuild after it.
TEST(Join, ARankWithoutAnyBatchShadowsFromTheStart) {
  run({{0, 2, 4}});
  run({{2, 0}, false});
}

// A rank that shadowed accumulates its no_sync passes again after the Join:
// with find_unused_parameters, a synchronized pass that reaches no parameter
// still contributes what no_sync accumulated, on every rank.
TEST(Join, AfterAJoinNoSyncPassesCountAgain) {
  struct LinearOrNotImpl : torch::nn::Module {
    LinearOrNotImpl() { lin = register_module("lin", torch::nn::Linear(4, 1)); }
    torch::Tensor forward(torch::Tensor x, int64_t use) { return use ? lin(x) : x.sum(1, true); }
    torch::nn::Linear lin{nullptr};
  };
  spawn(2, [](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    DistributedDataParallel model(
        std::make_shared<LinearOrNotImpl>(),
        DistributedDataParallelOptions().process_group(pg).find_unused_parameters(true));
    const auto x = torch::ones({2, 4});
    {
      Join join({*model});
      if (rank == 1) model->forward(x, int64_t{1}).sum().backward();  // rank 0 shadows it
    }
    model->zero_grad(/*set_to_none=*/true);
    model->no_sync([&] { model->forward(x, int64_t{1}).sum().backward(); });
    const auto expected = model->module()->parameters()[0].grad().clone();  // the same on both
    const auto free_input = torch::ones({2, 4}).requires_grad_();
    model->forward(free_input, int64_t{0}).sum().backward();  // reaches no parameter
    EXPECT_TRUE(torch::allclose(model->module()->parameters()[0].grad(), expected))
        << "rank " << rank << ": the no_sync pass's gradient, averaged over both ranks";
  });
}

TEST(Join, ThrowOnEarlyTerminationRaisesOnEveryRankInTheSameIteration) {
  spawn(3, [](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 3);
    DistributedDataParallel model(Net(), DistributedDataParallelOptions().process_group(pg));
    const int batches = rank == 0 ? 1 : 3;
    int done = 0;
    Raised r = raised<EarlyTermination>([&] {
      Join join({*model}, JoinOptions().throw_on_early_termination(true));
      for (; done < batches; ++done) {
        Sample s = sample(rank, done, false);
        torch::mse_loss(model->forward(s.x, s.use_side), s.y).backward();
      }
    });
    EXPECT_TRUE(r) << r;
    EXPECT_EQ(r.context.operation, "Join(throw_on_early_termination)") << r;
    EXPECT_EQ(r.context.rank, rank) << r;
    // Rank 0 ran out of inputs; the other ranks of the 3 still had some.
    EXPECT_EQ(r.context.world_size, 3) << r;
    EXPECT_EQ(r.context.peers, std::vector<int>{0}) << r;
    EXPECT_EQ(done, 1) << "rank " << rank << ": raised in the iteration after rank 0 ran out";
    // Every rank is in step afterwards: the next iteration runs.
    Sample s = sample(rank, 9, false);
    torch::mse_loss(model->forward(s.x, s.use_side), s.y).backward();
  });
}

// The module's forward starts each iteration: listed after an optimizer,
// every rank is told at its first forward, before any collective.
TEST(Join, TheModuleMustComeFirst) {
  spawn(2, [](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    DistributedDataParallel model(Net(), DistributedDataParallelOptions().process_group(pg));
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
    OptimizerJoinable joinable_opt(opt, pg);
    Raised r = raised<InvalidArgument>([&] {
      Join join({joinable_opt, *model});
      Sample s = sample(rank, 0, false);
      model->forward(s.x, s.use_side);
    });
    EXPECT_TRUE(r) << r;
    EXPECT_EQ(r.context.operation, "Join") << r;
    EXPECT_EQ(r.context.rank, rank) << r;
    EXPECT_EQ(r.context.world_size, 2) << r;
  });
}

TEST(Join, DividingByTheContributorsWithACommHookIsRefused) {
  spawn(2, [](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    DistributedDataParallel model(Net(), DistributedDataParallelOptions().process_group(pg));
    model->register_comm_hook(pg, allreduce_hook);
    Raised r = raised<InvalidArgument>(
        [&] { Join join({*model}, JoinOptions().divide_by_initial_world_size(false)); });
    EXPECT_TRUE(r) << r;
    EXPECT_EQ(r.context.rank, rank) << r;
    EXPECT_EQ(r.context.world_size, 2) << r;
    EXPECT_TRUE(r.mentions("divide_by_initial_world_size(false)")) << r;  // the option refused
    // The refused Join left the module free: a plain Join and one that
    // lists it twice behave as they should.
    r = raised<InvalidArgument>([&] { Join twice({*model, *model}); });
    EXPECT_TRUE(r) << r;
    EXPECT_EQ(r.context.operation, "Join") << r;
    EXPECT_EQ(r.context.rank, rank) << r;
    Join join({*model});
  });
}

}  // namespace
}  // namespace ddp::testing
