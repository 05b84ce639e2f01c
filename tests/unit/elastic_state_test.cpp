// ElasticState's in-memory commit (every libtorch optimizer, the fast path
// and the serialized one), ElasticSampler across a change of world size,
// and the generation record of the store.
#include <ddp/elastic.h>
#include <ddp/errors.h>

#include "elastic/record.h"
#include "support/raised.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>
#include <sstream>

namespace ddp {
namespace {

torch::nn::Sequential make_net() {
  torch::manual_seed(11);
  auto net = torch::nn::Sequential(torch::nn::Linear(6, 5), torch::nn::BatchNorm1d(5),
                                   torch::nn::Linear(5, 3));
  net->to(torch::kDouble);
  return net;
}

void train_step(torch::nn::Sequential& net, torch::optim::Optimizer& opt, int k) {
  torch::manual_seed(100 + k);
  auto x = torch::randn({8, 6}, torch::kDouble);
  opt.zero_grad();
  net->forward(x).pow(2).mean().backward();
  opt.step();
}

// A deep copy of `net` and of `opt`'s state, through serialization.
template <typename Opt, typename Options>
std::pair<torch::nn::Sequential, std::unique_ptr<Opt>> clone(torch::nn::Sequential& net, Opt& opt,
                                                             const Options& options) {
  auto copy = make_net();
  std::stringstream module_bytes, optimizer_bytes;
  torch::save(net, module_bytes);
  torch::load(copy, module_bytes);
  auto copy_opt = std::make_unique<Opt>(copy->parameters(), options);
  torch::save(opt, optimizer_bytes);
  torch::load(*copy_opt, optimizer_bytes);
  return {copy, std::move(copy_opt)};
}

void expect_same(torch::nn::Sequential& a, torch::nn::Sequential& b) {
  auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(torch::equal(pa[i], pb[i])) << "parameter " << i;
  auto ba = a->buffers(), bb = b->buffers();
  for (size_t i = 0; i < ba.size(); ++i) EXPECT_TRUE(torch::equal(ba[i], bb[i])) << "buffer " << i;
}

// `net` equals `copy`, and again after both took training steps `first` to
// `last` (inclusive) with their optimizers.
void expect_same_after_steps(torch::nn::Sequential& net, torch::optim::Optimizer& opt,
                             torch::nn::Sequential& copy, torch::optim::Optimizer& copy_opt,
                             int first, int last) {
  expect_same(net, copy);
  for (int k = first; k <= last; ++k) {
    train_step(net, opt, k);
    train_step(copy, copy_opt, k);
  }
  expect_same(net, copy);
}

// Commit after 2 steps, take 3 more (changing the learning rate too),
// restore: 2 further steps from there equal 2 steps of a copy taken at
// the commit.
template <typename Opt, typename Options>
void commit_restore_round_trip(Options options) {
  auto net = make_net();
  Opt opt(net->parameters(), options);
  ElasticState state(net, opt);
  for (int k = 0; k < 2; ++k) train_step(net, opt, k);
  state.training.iteration = 2;
  state.training.extra["best"] = torch::tensor({0.5});
  state.commit();
  auto [copy, copy_opt] = clone(net, opt, options);
  for (int k = 2; k < 5; ++k) train_step(net, opt, k);
  static_cast<Options&>(opt.param_groups()[0].options()).lr(123.0);
  state.training.iteration = 5;
  state.training.extra["best"] = torch::tensor({0.1});
  state.restore();
  EXPECT_EQ(state.training.iteration, 2);
  EXPECT_EQ(state.training.extra["best"].item<float>(), 0.5f);
  EXPECT_EQ(state.committed_iteration(), 2);
  expect_same_after_steps(net, opt, copy, *copy_opt, 10, 11);
}

TEST(ElasticState, CommitAndRestoreSGD) {
  commit_restore_round_trip<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9));
}
TEST(ElasticState, CommitAndRestoreAdam) {
  commit_restore_round_trip<torch::optim::Adam>(torch::optim::AdamOptions(0.01).amsgrad(true));
}
TEST(ElasticState, CommitAndRestoreAdamW) {
  commit_restore_round_trip<torch::optim::AdamW>(torch::optim::AdamWOptions(0.01));
}
TEST(ElasticState, CommitAndRestoreAdagrad) {
  commit_restore_round_trip<torch::optim::Adagrad>(torch::optim::AdagradOptions(0.1));
}
TEST(ElasticState, CommitAndRestoreRMSprop) {
  commit_restore_round_trip<torch::optim::RMSprop>(
      torch::optim::RMSpropOptions(0.01).momentum(0.5).centered(true));
}
// LBFGS's state (and any optimizer's but libtorch's per-parameter ones)
// cannot be copied: the commit says so rather than restore something else.
TEST(ElasticState, CommitRefusesAnOptimizerItCannotCopy) {
  auto net = make_net();
  torch::optim::LBFGS opt(net->parameters(), torch::optim::LBFGSOptions(0.1));
  ElasticState state(net, opt);
  torch::manual_seed(100);
  auto x = torch::randn({8, 6}, torch::kDouble);
  opt.step([&] {
    opt.zero_grad();
    auto loss = net->forward(x).pow(2).mean();
    loss.backward();
    return loss;
  });
  ddp::testing::Raised r = ddp::testing::raised([&] { state.commit(); });
  ASSERT_TRUE(r) << "commit accepted LBFGS's state: " << r;
  EXPECT_EQ(r.context.operation, "ElasticState::commit") << r;
  // The optimizer state's type that cannot be copied.
  EXPECT_TRUE(r.mentions("LBFGSParamState")) << r;
}

// A boundary without a full copy: a step that fails after its forward and
// backward (BatchNorm's statistics moved) but before the optimizer's step
// comes back to that boundary exactly; one that fails after the optimizer
// stepped goes back to the last full copy.
TEST(ElasticState, LightBoundaryAndFullCopy) {
  auto net = make_net();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9);
  ElasticState state(net, opt);
  train_step(net, opt, 0);
  state.training.iteration = 1;
  state.commit(/*full=*/true);
  auto [at_full, at_full_opt] = clone(net, opt, options);
  for (int k = 1; k < 3; ++k) train_step(net, opt, k);
  state.training.iteration = 3;
  state.commit(/*full=*/false);
  auto [at_boundary, at_boundary_opt] = clone(net, opt, options);

  torch::manual_seed(7);  // forward and backward, no optimizer step
  opt.zero_grad();
  net->forward(torch::randn({8, 6}, torch::kDouble)).pow(2).mean().backward();
  state.training.iteration = 99;
  state.restore();
  EXPECT_EQ(state.committed_iteration(), 3);
  EXPECT_EQ(state.training.iteration, 3);
  expect_same_after_steps(net, opt, at_boundary, *at_boundary_opt, 20, 20);

  state.training.iteration = 4;
  state.commit(/*full=*/false);
  train_step(net, opt, 21);  // the optimizer stepped: back to the full copy
  state.restore();
  EXPECT_EQ(state.committed_iteration(), 1);
  EXPECT_EQ(state.training.iteration, 1);
  expect_same_after_steps(net, opt, at_full, *at_full_opt, 30, 30);
}

TEST(ElasticState, RestoreWithoutCommitKeepsTheState) {
  auto net = make_net();
  torch::optim::SGD opt(net->parameters(), 0.1);
  ElasticState state(net, opt);
  EXPECT_EQ(state.committed_iteration(), -1);
  const auto before = net->parameters()[0].clone();
  state.restore();
  EXPECT_TRUE(torch::equal(before, net->parameters()[0]));
}

// An epoch consumed at world size 3, then 2 from step 4 on: every sample
// once, none twice.
TEST(ElasticSampler, NoSampleLostOrRepeatedAcrossAChangeOfWorld) {
  ElasticSampler sampler(100, /*batch_size=*/4, /*shuffle=*/true, /*seed=*/5);
  TrainingState state;
  std::multiset<int64_t> seen;
  for (int step = 0;; ++step) {
    const int world = step < 4 ? 3 : 2;
    bool any = false;
    for (int r = 0; r < world; ++r) {
      for (int64_t i : sampler.indices(state, r, world)) {
        seen.insert(i);
        any = true;
      }
    }
    if (!any) break;
    sampler.advance(state, world);
  }
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 100u);
  EXPECT_EQ(state.epoch_samples, 100);
  // The next epoch has another order, the same on every rank.
  const auto first = sampler.indices(state, 0, 2);
  EXPECT_EQ(sampler.next_epoch(state), 1);
  EXPECT_TRUE(first.empty());
  ElasticSampler other(100, 4, true, 5);
  EXPECT_EQ(sampler.indices(state, 1, 2), other.indices(state, 1, 2));
  EXPECT_THROW(ElasticSampler(0, 4), InvalidArgument);
}

TEST(GenerationRecord, RoundTripAndGarbage) {
  using detail::elastic::GenerationRecord;
  GenerationRecord r;
  r.members = {0, 2, 1000000};
  r.left = {1};
  r.joined = {1000000};
  r.formed_ms = 412;
  const auto back = GenerationRecord::decode(r.encode());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->members, r.members);
  EXPECT_EQ(back->left, r.left);
  EXPECT_EQ(back->joined, r.joined);
  EXPECT_EQ(back->formed_ms, 412);
  EXPECT_EQ(r.encode(), "members=0,2,1000000;left=1;joined=1000000;formed_ms=412");
  EXPECT_FALSE(GenerationRecord::decode("members=;left=;joined=;formed_ms=1"));
  EXPECT_FALSE(GenerationRecord::decode("garbage"));
  EXPECT_FALSE(GenerationRecord::decode("members=x;left=;joined=;formed_ms=1"));
}

}  // namespace
}  // namespace ddp
