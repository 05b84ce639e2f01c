// The Reducer's error paths, threads as ranks: every rank raises together,
// naming the rank and what it did, and the next iteration runs.
#include "reducer_fixtures.h"

namespace ddp::testing {
namespace {

TEST(Reducer, AParameterWithoutGradientOnOneRankIsAnErrorOnEveryRank) {
  spawn(2, [](int rank, StorePtr store) {
    Chain chain;
    Reducer reducer(chain.params, chain.names, make_group(store, rank, 2));
    for (auto& p : chain.params) p.mutable_grad() = at::full_like(p, 9.0);
    at::Tensor out = chain.forward(Chain::input(rank, 0), rank == 1 ? 0 : -1);
    reducer.prepare_for_backward({out});
    std::string m = error_message([&] { out.sum().backward(); });
    EXPECT_TRUE(contains(m, "some parameters got no gradient on rank(s) 1 (1)")) << m;
    if (rank == 1) EXPECT_TRUE(contains(m, "#0 'w0'")) << m;
    EXPECT_TRUE(contains(m, "find_unused_parameters(true)")) << m;
    // The next iteration works: the counters restarted in step.
    for (auto& p : chain.params) p.mutable_grad() = at::Tensor();
    out = chain.forward(Chain::input(rank, 1));
    reducer.prepare_for_backward({out});
    out.sum().backward();
    expect_grads(chain, expected_average(2, {1}), rank);
  });
}

TEST(Reducer, ASkippedBackwardOrASecondBackwardIsAnErrorOnEveryRank) {
  spawn(2, [](int rank, StorePtr store) {
    Chain chain;
    Reducer reducer(chain.params, chain.names, make_group(store, rank, 2));
    // Rank 1 runs a forward whose backward it skips.
    if (rank == 1) reducer.prepare_for_backward({chain.forward(Chain::input(rank, 0))});
    at::Tensor out = chain.forward(Chain::input(rank, 0));
    reducer.prepare_for_backward({out});
    std::string m = error_message([&] { out.sum().backward(); });
    EXPECT_TRUE(contains(m, "different numbers of forward passes")) << m;
    EXPECT_TRUE(contains(m, "rank 1 ran a forward whose backward() was skipped")) << m;

    // Rank 0 runs backward() twice after one forward: reported in the next iteration.
    out = chain.forward(Chain::input(rank, 1));
    reducer.prepare_for_backward({out});
    out.sum().backward({}, /*retain_graph=*/rank == 0);
    if (rank == 0) out.sum().backward();
    out = chain.forward(Chain::input(rank, 2));
    reducer.prepare_for_backward({out});
    m = error_message([&] { out.sum().backward(); });
    EXPECT_TRUE(contains(m, "rank 0 ran a backward() that no DDP forward prepared")) << m;
  });
}

TEST(Reducer, ACommHookAfterTrainingStartedIsRefused) {
  spawn(1, [](int rank, StorePtr store) {
    Chain chain;
    auto pg = make_group(store, rank, 1);
    Reducer reducer(chain.params, chain.names, pg);
    at::Tensor out = chain.forward(Chain::input(rank, 0));
    reducer.prepare_for_backward({out});
    out.sum().backward();
    std::string m = error_message([&] {
      reducer.register_comm_hook([](GradBucket& b) { return completed_future(b.buffer()); });
    });
    EXPECT_TRUE(contains(m, "training has started")) << m;
  });
}

}  // namespace
}  // namespace ddp::testing
