// Checkpoint and resume, threads as ranks: what a checkpoint
// brings back, and every failure an error on every rank that names the cause
// (a different model, a damaged file, a file rank 0 cannot read or write).
// The exact resume of a killed multi-process job: checkpoint_resume_test.sh.
#include "spawn.h"
#include "support/bitwise.h"
#include "support/raised.h"
#include "support/scratch_dir.h"

#include <ddp/checkpoint.h>
#include <ddp/errors.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace ddp::testing {
namespace {

// fc1 -> fc2 (named `second`, `out` outputs), a buffer, float64 and the same
// values on every rank without drawing from the shared generator.
struct Net : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  explicit Net(int64_t out = 2, const std::string& second = "fc2") {
    fc1 = register_module("fc1", torch::nn::Linear(4, 8));
    fc2 = register_module(second, torch::nn::Linear(8, out));
    register_buffer("seen", torch::zeros({1}, torch::kDouble));
    to(torch::kDouble);
    torch::NoGradGuard no_grad;
    int i = 0;
    for (auto& p : parameters()) {
      p.copy_(torch::linspace(-1, 1, p.numel(), torch::kDouble).view_as(p) * 0.1 * ++i);
    }
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }
};

void train_steps(Net& net, torch::optim::Optimizer& opt, int steps) {
  for (int s = 0; s < steps; ++s) {
    auto x = torch::linspace(-2, 2, 64, torch::kDouble).view({16, 4}) * (s + 1);
    opt.zero_grad();
    torch::mse_loss(net.forward(x), x.narrow(1, 0, 2).sin()).backward();
    opt.step();
    torch::NoGradGuard no_grad;
    net.named_buffers()["seen"].add_(16);
  }
}

std::vector<torch::Tensor> snapshot(const Net& net) {
  std::vector<torch::Tensor> out;
  for (const auto& p : net.parameters()) out.push_back(p.detach().clone());
  for (const auto& b : net.buffers()) out.push_back(b.clone());
  return out;
}

class Checkpoint : public ::testing::Test {
 protected:
  // Saves a checkpoint of Net() after 3 steps on `ranks` ranks.
  void save_reference(int ranks) {
    on_ranks(ranks, [&](int, ProcessGroupPtr pg) {
      Net net;
      torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
      train_steps(net, opt, 3);
      save_checkpoint(path_, net, opt, TrainingState{0, 3, 48, {}},
                      CheckpointOptions().process_group(pg));
    });
  }

  // Runs `body` on every rank of a job of `ranks`, each with its group.
  static void on_ranks(int ranks, const std::function<void(int rank, ProcessGroupPtr pg)>& body) {
    spawn(ranks, [&](int rank, StorePtr store) { body(rank, make_group(store, rank, ranks)); });
  }

  // Runs `load` on every rank of a 2-rank job and expects a CheckpointError
  // there, raised by that rank, with the facts `expect` checks.
  void expect_error_everywhere(const std::function<void(ProcessGroupPtr)>& load,
                               const std::function<void(const Raised&)>& expect) {
    on_ranks(2, [&](int rank, ProcessGroupPtr pg) {
      Raised r = raised<CheckpointError>([&] { load(pg); });
      EXPECT_TRUE(r) << "rank " << rank << ": " << r;
      if (!r) return;
      EXPECT_TRUE(r.on(*pg)) << r;
      expect(r);
    });
  }

  // A failure of rank 0's file: rank 0 at fault, the path named.
  static std::function<void(const Raised&)> rank_zeros_file(const std::string& path) {
    return [path](const Raised& r) {
      EXPECT_EQ(r.context.peers, std::vector<int>{0}) << r;
      EXPECT_TRUE(r.mentions("'" + path + "'")) << r;
    };
  }

  const ScratchDir scratch_{"ddp-checkpoint-test"};
  const std::string dir_ = scratch_.path(), path_ = dir_ + "/run.ckpt";
};

TEST_F(Checkpoint, ResumesModuleOptimizerStateAndEachRanksGenerator) {
  on_ranks(2, [&](int rank, ProcessGroupPtr pg) {
    const auto options = CheckpointOptions().process_group(pg);
    Net net;
    torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    EXPECT_FALSE(load_checkpoint(path_, net, opt, options)) << "no file yet: nothing to resume";
    train_steps(net, opt, 3);
    TrainingState state{2, 3, 48, {{"best_loss", torch::tensor({0.25}, torch::kDouble)}}};
    pg->barrier()->wait();  // no rank draws from the shared generator while another saves it
    save_checkpoint(path_, net, opt, state, options);
    pg->barrier()->wait();
    at::Tensor drawn_after_save;
    if (rank == 0) drawn_after_save = torch::randn({8}, torch::kDouble);
    pg->barrier()->wait();     // before the other ranks' Net() draws its initial values
    train_steps(net, opt, 2);  // the steps a resumed job must repeat exactly
    const auto uninterrupted = snapshot(net);

    Net fresh;
    torch::optim::SGD fresh_opt(fresh.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    pg->barrier()->wait();
    auto resumed = load_checkpoint(path_, fresh, fresh_opt, options);
    pg->barrier()->wait();
    ASSERT_TRUE(resumed);
    EXPECT_EQ(resumed->epoch, 2);
    EXPECT_EQ(resumed->iteration, 3);
    EXPECT_EQ(resumed->epoch_samples, 48);
    ASSERT_EQ(resumed->extra.count("best_loss"), 1u);
    EXPECT_TRUE(torch::equal(resumed->extra["best_loss"], state.extra["best_loss"]));
    if (rank == 0) {
      EXPECT_TRUE(torch::equal(torch::randn({8}, torch::kDouble), drawn_after_save))
          << "the generator does not continue where it was saved";
    }
    train_steps(fresh, fresh_opt, 2);  // momentum restored: the same two steps, bit for bit
    EXPECT_TRUE(bitwise_equal(snapshot(fresh), uninterrupted)) << "rank " << rank;
  });
}

TEST_F(Checkpoint, ADifferentModelNamesTheFirstDifferenceAndIsLeftUntouched) {
  save_reference(2);
  const auto try_load = [&](int64_t out, const std::string& second) {
    return [&, out, second](ProcessGroupPtr pg) {
      Net other(out, second);
      const auto before = snapshot(other);
      torch::optim::SGD opt(other.parameters(), 0.1);
      try {
        load_checkpoint(path_, other, opt, CheckpointOptions().process_group(pg));
      } catch (...) {
        EXPECT_TRUE(bitwise_equal(snapshot(other), before)) << "a failed load changed the model";
        throw;
      }
    };
  };
  // Every rank fails on its own model: no other rank at fault.
  expect_error_everywhere(try_load(3, "fc2"), [](const Raised& r) {
    EXPECT_EQ(r.context.operation, "load_checkpoint") << r;
    EXPECT_TRUE(r.context.peers.empty()) << r;
    EXPECT_TRUE(r.mentions("'fc2.weight'")) << r;   // the first difference
    EXPECT_TRUE(r.mentions("Double [2, 8]")) << r;  // as saved
    EXPECT_TRUE(r.mentions("Double [3, 8]")) << r;  // in the model
  });
  expect_error_everywhere(try_load(2, "head"), [](const Raised& r) {
    EXPECT_EQ(r.context.operation, "load_checkpoint") << r;
    EXPECT_TRUE(r.context.peers.empty()) << r;
    EXPECT_TRUE(r.mentions("'head.weight'")) << r;  // only in the model
    EXPECT_TRUE(r.mentions("Double [2, 8]")) << r;
  });
}

TEST_F(Checkpoint, ARankThatCannotLoadMakesEveryRankFail) {
  save_reference(2);
  on_ranks(2, [&](int rank, ProcessGroupPtr pg) {
    Net net(rank == 1 ? 3 : 2);  // rank 1 builds another model
    torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    const auto before = snapshot(net);
    Raised r = raised<CheckpointError>(
        [&] { load_checkpoint(path_, net, opt, CheckpointOptions().process_group(pg)); });
    EXPECT_TRUE(r) << "rank " << rank << ": " << r;
    EXPECT_EQ(r.context.operation, "load_checkpoint") << r;
    EXPECT_EQ(r.context.rank, rank) << r;
    if (rank == 0) {  // it loads here: rank 1 is at fault
      EXPECT_EQ(r.context.peers, std::vector<int>{1}) << r;
    } else {  // its own model differs
      EXPECT_TRUE(r.context.peers.empty()) << r;
      EXPECT_TRUE(r.mentions("'fc2.weight'")) << r;
      EXPECT_TRUE(r.mentions("Double [2, 8]")) << r;
    }
    EXPECT_TRUE(bitwise_equal(snapshot(net), before)) << "rank " << rank << "'s model changed";
  });
}

TEST_F(Checkpoint, AnotherOptimizersStateIsAnError) {
  save_reference(2);
  expect_error_everywhere(
      [&](ProcessGroupPtr pg) {
        Net net;
        torch::optim::Adam adam(net.parameters(), 0.01);
        load_checkpoint(path_, net, adam, CheckpointOptions().process_group(pg));
      },
      [](const Raised& r) {
        EXPECT_EQ(r.context.operation, "load_checkpoint") << r;
        EXPECT_TRUE(r.context.peers.empty()) << r;  // every rank's own optimizer
      });
}

TEST_F(Checkpoint, DamagedFilesNameThePathOnEveryRank) {
  save_reference(2);
  std::string bytes;
  {
    std::ifstream in(path_, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto load = [&](ProcessGroupPtr pg) {
    Net net;
    torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    load_checkpoint(path_, net, opt, CheckpointOptions().process_group(pg));
  };
  const auto write = [&](const std::string& content) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << content;
  };
  write(bytes.substr(0, bytes.size() - 100));
  expect_error_everywhere(load, rank_zeros_file(path_));  // truncated
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x10;
  write(flipped);
  expect_error_everywhere(load, rank_zeros_file(path_));  // corrupt
  write("a text file\n");
  expect_error_everywhere(load, rank_zeros_file(path_));  // not a checkpoint
  write(bytes);
  on_ranks(2, [&](int, ProcessGroupPtr pg) { load(pg); });
}

TEST_F(Checkpoint, OnlyRankZerosDiskCounts) {
  save_reference(2);
  // Rank 1 has a checkpoint at its path, rank 0 none: nothing to resume.
  on_ranks(2, [&](int rank, ProcessGroupPtr pg) {
    Net net;
    torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    const std::string mine = rank == 0 ? dir_ + "/absent.ckpt" : path_;
    EXPECT_FALSE(load_checkpoint(mine, net, opt, CheckpointOptions().process_group(pg)))
        << "rank " << rank;
  });
  // A path rank 0 cannot read fails on every rank, naming it.
  const std::string directory = dir_ + "/a-directory";
  ASSERT_EQ(mkdir(directory.c_str(), 0755), 0);
  expect_error_everywhere(
      [&](ProcessGroupPtr pg) {
        Net net;
        torch::optim::SGD opt(net.parameters(), 0.1);
        load_checkpoint(directory, net, opt, CheckpointOptions().process_group(pg));
      },
      rank_zeros_file(directory));
}

TEST_F(Checkpoint, AFailedSaveIsAnErrorEverywhereAndKeepsThePreviousFile) {
  save_reference(2);
  ASSERT_EQ(mkdir((path_ + ".tmp").c_str(), 0755), 0);  // where the next save would write
  expect_error_everywhere(
      [&](ProcessGroupPtr pg) {
        Net net;
        torch::optim::SGD opt(net.parameters(), 0.1);
        save_checkpoint(path_, net, opt, {}, CheckpointOptions().process_group(pg));
      },
      rank_zeros_file(path_ + ".tmp"));  // where rank 0 could not write
  spawn(2, [&](int rank, StorePtr store) {
    Net net;
    torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    auto state = load_checkpoint(path_, net, opt,
                                 CheckpointOptions().process_group(make_group(store, rank, 2)));
    ASSERT_TRUE(state);
    EXPECT_EQ(state->iteration, 3);
  });
  expect_error_everywhere(
      [&](ProcessGroupPtr pg) {
        Net net;
        torch::optim::SGD opt(net.parameters(), 0.1);
        save_checkpoint(dir_ + "/no/such/dir/x.ckpt", net, opt, {},
                        CheckpointOptions().process_group(pg));
      },
      [&](const Raised& r) {
        rank_zeros_file(dir_ + "/no/such/dir/x.ckpt.tmp")(r);
        EXPECT_TRUE(r.mentions(std::strerror(ENOENT))) << r;  // rank 0's OS error
      });
}

TEST_F(Checkpoint, RngStatesOfAnotherWorldSizeAreAnErrorUnlessLeftOut) {
  save_reference(2);
  on_ranks(1, [&](int rank, ProcessGroupPtr pg) {
    Net net;
    torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    Raised r = raised<CheckpointError>(
        [&] { load_checkpoint(path_, net, opt, CheckpointOptions().process_group(pg)); });
    EXPECT_TRUE(r) << "no error for RNG states of 2 ranks in a 1-rank job: " << r;
    EXPECT_EQ(r.context.operation, "load_checkpoint") << r;
    EXPECT_EQ(r.context.world_size, 1) << r;  // this job's ranks
    EXPECT_TRUE(r.mentions(" 2 ")) << r;      // the checkpoint's ranks
    EXPECT_TRUE(r.mentions("rng_state(false)")) << r;
    EXPECT_TRUE(
        load_checkpoint(path_, net, opt, CheckpointOptions().process_group(pg).rng_state(false)));
  });
}

TEST(ResumingSampler, SkipsTheFirstSamplesOfItsFirstPassOnly) {
  using torch::data::samplers::DistributedRandomSampler;
  DistributedRandomSampler plain(100, 2, 1);
  plain.set_epoch(3);
  plain.reset();
  const std::vector<size_t> full = *plain.next(1000);
  ASSERT_EQ(full.size(), 50u);

  DistributedRandomSampler inner(100, 2, 1);
  inner.set_epoch(3);
  ResumingSampler<DistributedRandomSampler> resumed(std::move(inner), 20);
  resumed.reset();  // what a DataLoader's begin() does
  std::vector<size_t> rest;
  while (auto batch = resumed.next(7)) rest.insert(rest.end(), batch->begin(), batch->end());
  EXPECT_EQ(rest, std::vector<size_t>(full.begin() + 20, full.end()));
  resumed.reset();
  EXPECT_EQ(*resumed.next(1000), full) << "a later pass is whole";
  EXPECT_THROW(ResumingSampler<DistributedRandomSampler>(DistributedRandomSampler(10), -1),
               InvalidArgument);
}

}  // namespace
}  // namespace ddp::testing
