// ZeroOptions::elastic: each rank's replica of the next rank's shard equals
// the owner's state exactly after every step, the parameters equal the
// unsharded optimizer's, and the misuses are errors. (Re-partitioning over
// a new generation: elastic_test.sh's "zero" case, through the runner.)
#include "spawn.h"
#include "support/raised.h"
#include "compat/torch_compat.h"
#include "zero/zero_impl.h"

#include <ddp/ddp.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <mutex>

namespace ddp::testing {
namespace {

namespace optim = torch::optim;

std::vector<torch::Tensor> make_params() {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(21);
  std::vector<torch::Tensor> params;
  for (auto shape : std::vector<std::vector<int64_t>>{{6, 4}, {6}, {3, 6}, {3}, {40}}) {
    params.push_back(at::randn(shape, gen, torch::kFloat64).requires_grad_());
  }
  return params;
}

// The same gradients on every rank, as DDP's allreduce leaves them.
void set_grads(std::vector<torch::Tensor>& params, int step) {
  for (size_t i = 0; i < params.size(); ++i) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + 10 * step + i);
    params[i].mutable_grad() = at::randn(params[i].sizes(), gen, torch::kFloat64);
  }
}

// Per rank: #i -> the tensors of the state it keeps for #i.
using Kept = std::vector<std::map<size_t, std::vector<torch::Tensor>>>;

template <typename Options>
void check_replicas(const Options& defaults, const std::string& name) {
  const int steps = 4;
  auto want = make_params();
  typename ZeroOptimizerTraits<Options>::Optimizer plain(want, defaults);
  for (int s = 0; s < steps; ++s) {
    set_grads(want, s);
    plain.step();
  }
  for (int world = 1; world <= 4; ++world) {
    Kept kept(world);
    std::mutex mutex;
    spawn(world, [&](int rank, StorePtr store) {
      auto params = make_params();
      ZeroRedundancyOptimizer opt(params, defaults, ZeroOptions().elastic(true));
      auto& impl = detail::ZeroAccess::of(opt);
      std::vector<std::unique_ptr<optim::OptimizerOptions>> options;
      options.push_back(opt.param_groups()[0].options().clone());
      impl.shard(make_group(store, rank, world), options, {});
      for (int s = 0; s < steps; ++s) {
        set_grads(params, s);
        opt.step();
      }
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_TRUE(torch::equal(params[i], want[i]))
            << name << " world " << world << " rank " << rank << ": parameter #" << i;
        auto [map, key] = impl.home_of(i);
        if (!map) continue;
        std::vector<torch::Tensor> tensors;
        for (const auto& t :
             impl.wrapped.state_tensors(*map->at(compat::optimizer_state_key(*map, key)))) {
          if (t.defined()) tensors.push_back(t.clone());
        }
        std::lock_guard<std::mutex> lock(mutex);
        kept[rank][i] = std::move(tensors);
      }
    });
    for (size_t i = 0; i < want.size(); ++i) {
      std::vector<int> keepers;
      for (int r = 0; r < world; ++r) {
        if (kept[r].count(i)) keepers.push_back(r);
      }
      ASSERT_EQ(keepers.size(), world > 1 ? 2u : 1u)
          << name << " world " << world << ": parameter #" << i << "'s state kept by "
          << keepers.size() << " ranks";
      if (world == 1) continue;
      // The owner and the rank before it (which keeps the next rank's shard).
      const int a = keepers[0], b = keepers[1];
      EXPECT_TRUE(b == a + 1 || (a == 0 && b == world - 1)) << name << " #" << i;
      ASSERT_EQ(kept[a][i].size(), kept[b][i].size());
      for (size_t t = 0; t < kept[a][i].size(); ++t) {
        EXPECT_TRUE(torch::equal(kept[a][i][t], kept[b][i][t]))
            << name << " world " << world << ": parameter #" << i << ", state tensor " << t
            << " differs between ranks " << a << " and " << b;
      }
    }
  }
}

TEST(ZeroElastic, ReplicaOfTheNextShardEqualsItsOwnersState) {
  check_replicas(optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3), "SGD");
  check_replicas(optim::AdamOptions(1e-2), "Adam");
}

TEST(ZeroElastic, UnshardedItRefusesToStep) {
  auto params = make_params();
  ZeroRedundancyOptimizer opt(params, optim::SGDOptions(0.1), ZeroOptions().elastic(true));
  Raised r = raised<InvalidArgument>([&] { opt.step(); });
  EXPECT_TRUE(r) << r;
  EXPECT_EQ(r.context.operation, "ZeroRedundancyOptimizer") << r;
  EXPECT_EQ(r.context.rank, -1) << r;                  // no group: not sharded yet
  EXPECT_TRUE(r.mentions("ddp::ElasticRunner")) << r;  // what shards it
  EXPECT_THROW(opt.owner(0), InvalidArgument);
  EXPECT_THROW(opt.consolidate_state_dict(0), InvalidArgument);
  EXPECT_EQ(opt.state_bytes(), 0);
}

TEST(ZeroElastic, MisuseIsAnError) {
  spawn(1, [](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 1);
    auto params = make_params();
    EXPECT_THROW(ZeroRedundancyOptimizer(params, optim::SGDOptions(0.1),
                                         ZeroOptions().elastic(true).process_group(pg)),
                 InvalidArgument);
    // A ZeRO bound to one group cannot follow the generations of an elastic job.
    auto net = torch::nn::Linear(4, 2);
    ZeroRedundancyOptimizer bound(net->parameters(), optim::SGDOptions(0.1),
                                  ZeroOptions().process_group(pg));
    Raised r = raised<InvalidArgument>([&] { ElasticState state(net, bound); });
    EXPECT_TRUE(r) << r;
    EXPECT_EQ(r.context.operation, "ElasticState") << r;
    EXPECT_TRUE(r.mentions("ZeroOptions().elastic(true)")) << r;  // the option to use
  });
}

}  // namespace
}  // namespace ddp::testing
