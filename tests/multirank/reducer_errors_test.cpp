// The Reducer's error paths, threads as ranks: every rank raises together,
// naming the rank and what it did, and the next iteration runs.
#include "reducer_fixtures.h"

#include "support/raised.h"

namespace ddp::testing {
namespace {

TEST(Reducer, AParameterWithoutGradientOnOneRankIsAnErrorOnEveryRank) {
  spawn(2, [](int rank, StorePtr store) {
    Chain chain;
    auto pg = make_group(store, rank, 2);
    Reducer reducer(chain.params, chain.names, pg);
    for (auto& p : chain.params) p.mutable_grad() = at::full_like(p, 9.0);
    at::Tensor out = chain.forward(Chain::input(rank, 0), rank == 1 ? 0 : -1);
    reducer.prepare_for_backward({out});
    Raised r = raised<InvalidArgument>([&] { out.sum().backward(); });
    EXPECT_TRUE(r) << r;
    EXPECT_TRUE(r.on(*pg)) << r;
    EXPECT_EQ(r.context.peers, std::vector<int>{1}) << r;  // the rank whose parameter got none
    // Rank 1 names its parameter; rank 0 has none of its own to name.
    EXPECT_EQ(r.mentions("'w0'"), rank == 1) << r;
    EXPECT_TRUE(r.mentions("find_unused_parameters(true)")) << r;
    // The next iteration works: the counters restarted in step.
    chain.clear_grads();
    backward_step(reducer, chain, rank, 1);
    expect_grads(chain, expected_average(2, {1}), rank);
  });
}

TEST(Reducer, ASkippedBackwardOrASecondBackwardIsAnErrorOnEveryRank) {
  spawn(2, [](int rank, StorePtr store) {
    Chain chain;
    auto pg = make_group(store, rank, 2);
    Reducer reducer(chain.params, chain.names, pg);
    // Rank 1 runs a forward whose backward it skips.
    if (rank == 1) reducer.prepare_for_backward({chain.forward(Chain::input(rank, 0))});
    at::Tensor out = chain.forward(Chain::input(rank, 0));
    reducer.prepare_for_backward({out});
    Raised r = raised<InvalidArgument>([&] { out.sum().backward(); });
    EXPECT_TRUE(r) << r;
    EXPECT_TRUE(r.on(*pg)) << r;
    EXPECT_EQ(r.context.peers, std::vector<int>{1}) << r;  // rank 1 ran the extra forward

    // Rank 0 runs backward() twice after one forward: reported in the next iteration.
    out = chain.forward(Chain::input(rank, 1));
    reducer.prepare_for_backward({out});
    out.sum().backward({}, /*retain_graph=*/rank == 0);
    if (rank == 0) out.sum().backward();
    out = chain.forward(Chain::input(rank, 2));
    reducer.prepare_for_backward({out});
    r = raised<InvalidArgument>([&] { out.sum().backward(); });
    EXPECT_TRUE(r) << r;
    EXPECT_EQ(r.context.rank, rank) << r;
    EXPECT_EQ(r.context.peers, std::vector<int>{0}) << r;  // rank 0 ran the stray backward
  });
}

// An argument only rank 1 gets wrong: rank 1 raises its own error, the
// others one naming rank 1 (without the agreement they met rank 1's next
// construction in their collectives); the group works on.
TEST(Reducer, AnArgumentOneRankGetsWrongIsAnErrorOnEveryRank) {
  spawn(3, [](int rank, StorePtr store) {
    Chain chain;
    auto pg = make_group(store, rank, 3);
    const auto options = ReducerOptions().static_graph(rank == 1).layer_drop_hints(rank == 1);
    Raised r = raised<InvalidArgument>([&] { Reducer(chain.params, chain.names, pg, options); });
    ASSERT_TRUE(r) << r;
    EXPECT_TRUE(r.on(*pg)) << r;
    if (rank == 1) {
      EXPECT_TRUE(r.mentions("static_graph and layer_drop_hints")) << r;
      EXPECT_TRUE(r.context.peers.empty()) << r;
    } else {
      EXPECT_EQ(r.context.peers, std::vector<int>{1}) << r;
      EXPECT_TRUE(r.mentions("rank 1 ")) << r;
    }
    Reducer reducer(chain.params, chain.names, pg);
    backward_step(reducer, chain, rank, 0);
    expect_grads(chain, expected_average(3, {0}), rank);
  });
}

TEST(Reducer, ACommHookAfterTrainingStartedIsRefused) {
  spawn(1, [](int rank, StorePtr store) {
    Chain chain;
    auto pg = make_group(store, rank, 1);
    Reducer reducer(chain.params, chain.names, pg);
    backward_step(reducer, chain, rank, 0);
    Raised r = raised<InvalidArgument>([&] {
      reducer.register_comm_hook([](GradBucket& b) { return completed_future(b.buffer()); });
    });
    ASSERT_TRUE(r) << r;
    EXPECT_EQ(r.context.operation, "register_comm_hook") << r;
    EXPECT_EQ(r.context.rank, 0) << r;
    EXPECT_EQ(r.context.world_size, 1) << r;
  });
}

}  // namespace
}  // namespace ddp::testing
