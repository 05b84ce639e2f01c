// ZeroRedundancyOptimizer on 1-4 ranks equals the optimizer it wraps,
// unsharded, in one process; checkpoints round-trip across world sizes; bad
// input is an error on every rank.
#include "spawn.h"

#include <ddp/ddp.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <sstream>

namespace ddp::testing {
namespace {

namespace optim = torch::optim;

// A two-layer MLP as bare tensors, and a 1-2 MiB one (broadcast alone and in
// place; the others share buckets).
struct Mlp {
  std::vector<torch::Tensor> params;
  explicit Mlp(torch::Dtype dtype) {
    // A generator of its own: ranks are threads, the default one is shared.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    for (auto shape : std::vector<std::vector<int64_t>>{{32, 8}, {32}, {4, 32}, {4}, {512, 512}}) {
      params.push_back((at::randn(shape, gen, torch::TensorOptions(dtype)) * 0.3).requires_grad_());
    }
  }
  // The same gradients on every rank (as after DDP's allreduce).
  void backward(int64_t step) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + step);
    const auto opts = params[0].options().requires_grad(false);
    auto x = at::randn({10, 8}, gen, opts);
    auto g = at::randn({10, 4}, gen, opts);
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    auto h = torch::tanh(torch::mm(x, params[0].t()) + params[1]);
    auto out = torch::mm(h, params[2].t()) + params[3] + params[4].sum() * 0.01;
    (out * g).sum().backward();
  }
};

// Group 1 (biases) gets its own learning rate; halved after step 2.
template <typename Options>
std::vector<optim::OptimizerParamGroup> groups_of(const Mlp& m, const Options& defaults) {
  std::vector<optim::OptimizerParamGroup> g;
  g.emplace_back(std::vector<torch::Tensor>{m.params[0], m.params[2], m.params[4]});
  auto bias = std::make_unique<Options>(defaults);
  bias->lr(defaults.lr() * 2);
  g.emplace_back(std::vector<torch::Tensor>{m.params[1], m.params[3]}, std::move(bias));
  return g;
}

void schedule(optim::Optimizer& opt, int64_t step) {
  if (step != 2) return;
  for (auto& g : opt.param_groups()) g.options().set_lr(g.options().get_lr() * 0.5);
}

template <typename Options>
std::vector<torch::Tensor> train_unsharded(torch::Dtype dtype, const Options& defaults, int steps) {
  Mlp m(dtype);
  typename ZeroOptimizerTraits<Options>::Optimizer opt(groups_of(m, defaults), defaults);
  for (int s = 0; s < steps; ++s) {
    schedule(opt, s);
    m.backward(s);
    opt.step();
  }
  return m.params;
}

void expect_params(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                   double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = (got[i] - want[i]).abs().max().item<double>();
    EXPECT_LE(diff, tol) << what << ": parameter #" << i;
  }
}

template <typename Options>
void check_equivalence(const Options& defaults, const std::string& name) {
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-6;
    const int steps = 5;
    const auto want = train_unsharded(dtype, defaults, steps);
    for (int world = 1; world <= 4; ++world) {
      std::atomic<int64_t> state_total{0};
      spawn(world, [&](int rank, StorePtr store) {
        auto pg = make_group(store, rank, world);
        Mlp m(dtype);
        ZeroRedundancyOptimizer opt(groups_of(m, defaults), defaults,
                                    ZeroOptions().process_group(pg).bucket_cap_mb(0.001));
        for (int s = 0; s < steps; ++s) {
          schedule(opt, s);
          m.backward(s);
          opt.step();
        }
        expect_params(m.params, want, tol,
                      name + " world " + std::to_string(world) + " rank " + std::to_string(rank));
        state_total += opt.state_bytes();
      });
      // Each parameter's state lives on exactly one rank.
      Mlp m(dtype);
      typename ZeroOptimizerTraits<Options>::Optimizer plain(groups_of(m, defaults), defaults);
      m.backward(0);
      plain.step();
      int64_t unsharded = 0;
      for (const auto& item : plain.state()) {
        for (const auto& t : zero_wrapped(defaults).state_tensors(*item.second)) {
          if (t.defined()) unsharded += t.numel() * static_cast<int64_t>(t.element_size());
        }
      }
      EXPECT_EQ(state_total.load(), unsharded) << name << " world " << world;
    }
  }
}

TEST(Zero, SgdMomentumEqualsUnsharded) {
  check_equivalence(optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3), "SGD");
}
TEST(Zero, AdamEqualsUnsharded) { check_equivalence(optim::AdamOptions(1e-2), "Adam"); }
TEST(Zero, AdamWEqualsUnsharded) { check_equivalence(optim::AdamWOptions(1e-2), "AdamW"); }

TEST(Zero, RanksWithoutParametersTakePart) {
  // 2 parameters on 4 ranks: ranks 2 and 3 own nothing but still broadcast-receive.
  auto make = [] {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(8);
    return std::vector<torch::Tensor>{at::randn({3, 3}, gen, torch::kFloat64).requires_grad_(),
                                      at::randn({2}, gen, torch::kFloat64).requires_grad_()};
  };
  auto step = [](std::vector<torch::Tensor>& p, optim::Optimizer& opt) {
    for (auto& t : p) t.mutable_grad() = torch::Tensor();
    (p[0].sin().sum() * p[1].sum()).backward();
    opt.step();
  };
  auto want = make();
  optim::Adam plain(want, optim::AdamOptions(0.1));
  for (int s = 0; s < 3; ++s) step(want, plain);
  spawn(4, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 4);
    auto params = make();
    ZeroRedundancyOptimizer opt(params, optim::AdamOptions(0.1), ZeroOptions().process_group(pg));
    for (int s = 0; s < 3; ++s) step(params, opt);
    if (rank >= 2) EXPECT_EQ(opt.state_bytes(), 0);
    expect_params(params, want, 1e-12, "rank " + std::to_string(rank));
  });
}

TEST(Zero, PartitionIsGreedyLargestFirst) {
  Mlp m(torch::kFloat64);  // 256, 32, 128, 4, 262144 elements
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    ZeroRedundancyOptimizer opt(m.params, optim::SGDOptions(0.1), ZeroOptions().process_group(pg));
    // 262144 -> 0; then 256, 128, 32, 4 each to rank 1, the lighter one.
    EXPECT_EQ(opt.owner(4), 0);
    EXPECT_EQ(opt.owner(0), 1);
    EXPECT_EQ(opt.owner(2), 1);
    EXPECT_EQ(opt.owner(1), 1);
    EXPECT_EQ(opt.owner(3), 1);
  });
}

}  // namespace
}  // namespace ddp::testing
