// The Reducer on its own, threads as ranks: bucket readiness and
// launch order, rebuild, unused parameters, no_sync and static graph, in
// seconds rather than through multi-process runs (reducer_fixtures.h has
// the model).
#include "reducer_fixtures.h"

namespace ddp::testing {
namespace {

TEST(Reducer, BucketsLaunchInOrderAsSoonAsReadyDuringBackward) {
  for (bool as_view : {false, true}) {
    spawn(2, [as_view](int rank, StorePtr store) {
      Log log;
      auto pg = std::make_shared<RecordingGroup>(make_group(store, rank, 2), &log);
      Chain chain(&log);
      Reducer reducer(chain.params, chain.names, pg,
                      one_per_bucket().gradient_as_bucket_view(as_view));
      log.take();  // construction's checks across ranks
      EXPECT_EQ(reducer.bucket_indices(), (std::vector<std::vector<size_t>>{{2}, {1}, {0}}));
      backward_step(reducer, chain, rank, 0);
      Events events = log.take();
      ASSERT_EQ(events.size(), 7u);
      EXPECT_TRUE(is_status(events.back())) << events.back();
      events.pop_back();
      EXPECT_EQ(events, (Events{"grad w2", "allreduce 7", "grad w1", "allreduce 5", "grad w0",
                                "allreduce 3"}));
      expect_grads(chain, expected_average(2, {0}), rank);
      IterationStats s = reducer.stats();
      EXPECT_EQ(s.iteration, 1);
      EXPECT_EQ(s.bucket_count(), 3u);
      EXPECT_TRUE(s.synchronized);
    });
  }
}

// A hook gets each bucket undivided, in bucket order, and averages itself.
TEST(Reducer, ACommHookGetsEachBucketUndividedInOrder) {
  spawn(2, [](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    Chain chain;
    Reducer reducer(chain.params, chain.names, pg, one_per_bucket());
    std::vector<size_t> seen;
    std::vector<at::Tensor> buffers;
    reducer.register_comm_hook([&](GradBucket& bucket) {
      seen.push_back(bucket.index());
      buffers.push_back(bucket.buffer().clone());
      return allreduce_hook(pg, bucket);
    });
    backward_step(reducer, chain, rank, 0);
    EXPECT_EQ(seen, (std::vector<size_t>{0, 1, 2}));
    std::vector<at::Tensor> local = expected_average(1, {0});  // world 1: rank 0's own
    if (rank == 0) {
      for (size_t b = 0; b < 3; ++b) EXPECT_TRUE(at::allclose(buffers[b], local[2 - b]));
    }
    expect_grads(chain, expected_average(2, {0}), rank);
  });
}

TEST(Reducer, WithoutOverlapEveryBucketLaunchesAtTheEndOfBackward) {
  spawn(2, [](int rank, StorePtr store) {
    Log log;
    auto pg = std::make_shared<RecordingGroup>(make_group(store, rank, 2), &log);
    Chain chain(&log);
    Reducer reducer(chain.params, chain.names, pg, one_per_bucket().overlap_communication(false));
    log.take();  // construction's checks across ranks
    backward_step(reducer, chain, rank, 0);
    EXPECT_EQ(without_status(log.take()), (Events{"grad w2", "grad w1", "grad w0", "allreduce 7",
                                                  "allreduce 5", "allreduce 3"}));
    expect_grads(chain, expected_average(2, {0}), rank);
  });
}

// Registered as [w2, w0, w1]: bucketed in reverse ([w1], [w0], [w2]) while
// gradients arrive w2, w1, w0. The first iteration launches strictly in
// bucket order (w2's bucket waits for the others); the second runs on
// buckets rebuilt in rank 0's arrival order.
TEST(Reducer, RebuildsBucketsInRank0sGradientOrderAfterTheFirstIteration) {
  for (bool find_unused : {false, true}) {
    spawn(2, [find_unused](int rank, StorePtr store) {
      Log log;
      auto pg = std::make_shared<RecordingGroup>(make_group(store, rank, 2), &log);
      Chain chain(&log);
      std::vector<at::Tensor> params{chain.params[2], chain.params[0], chain.params[1]};
      Reducer reducer(params, {"w2", "w0", "w1"}, pg,
                      one_per_bucket().find_unused_parameters(find_unused));
      log.take();  // construction's checks across ranks
      EXPECT_EQ(reducer.bucket_indices(), (std::vector<std::vector<size_t>>{{2}, {1}, {0}}));
      for (int step = 0; step < 2; ++step) {
        chain.clear_grads();
        backward_step(reducer, chain, rank, step);
        Events events = without_status(log.take());
        if (step == 1 && !find_unused) {
          EXPECT_TRUE(reducer.stats().buckets_rebuilt);
          EXPECT_EQ(events.front(), "broadcast 3") << "rank 0's order, on every rank";
          events.erase(events.begin());
        }
        if (step == 0 || find_unused) {
          EXPECT_FALSE(reducer.stats().buckets_rebuilt);
          EXPECT_EQ(events, (Events{"grad w2", "grad w1", "allreduce 5", "grad w0", "allreduce 3",
                                    "allreduce 7"}));
        } else {
          EXPECT_EQ(events, (Events{"grad w2", "allreduce 7", "grad w1", "allreduce 5", "grad w0",
                                    "allreduce 3"}));
        }
        expect_grads(chain, expected_average(2, {step}), rank);
      }
      auto order = find_unused ? std::vector<std::vector<size_t>>{{2}, {1}, {0}}
                               : std::vector<std::vector<size_t>>{{0}, {2}, {1}};
      EXPECT_EQ(reducer.bucket_indices(), order);
    });
  }
}

// w0 is unused on rank 1 only: averaged with rank 1's zeros. A parameter
// no rank used keeps its gradient untouched.
TEST(Reducer, UnusedParametersContributeZerosAndGloballyUnusedOnesAreUntouched) {
  spawn(2, [](int rank, StorePtr store) {
    Chain chain;
    at::Tensor spare = at::ones({2}, at::kDouble).requires_grad_();
    spare.mutable_grad() = at::full({2}, 42.0, at::kDouble);
    std::vector<at::Tensor> params = chain.params;
    params.push_back(spare);
    Reducer reducer(params, {"w0", "w1", "w2", "spare"}, make_group(store, rank, 2),
                    ReducerOptions().find_unused_parameters(true));
    backward_step(reducer, chain, rank, 0, /*skip=*/rank == 1 ? 0 : -1);
    expect_grads(chain, expected_average(2, {0}, /*skip_on_rank1=*/0), rank);
    EXPECT_TRUE(at::equal(spare.grad(), at::full({2}, 42.0, at::kDouble)));
    EXPECT_EQ(reducer.stats().unused_parameters, 1);
  });
}

// Two no_sync passes, then a synchronized one: the average of all three
// passes' accumulated gradients, and no collective before the last.
TEST(Reducer, NoSyncAccumulatesLocallyAndTheNextSynchronizedPassReducesTheSum) {
  spawn(2, [](int rank, StorePtr store) {
    Log log;
    auto pg = std::make_shared<RecordingGroup>(make_group(store, rank, 2), &log);
    Chain chain;
    Reducer reducer(chain.params, chain.names, pg);
    log.take();  // construction's checks across ranks
    for (int step = 0; step < 3; ++step) {
      backward_step(reducer, chain, rank, step, /*skip=*/-1, /*synchronize=*/step == 2);
      if (step < 2) EXPECT_TRUE(log.take().empty()) << "a collective under no_sync";
    }
    expect_grads(chain, expected_average(2, {0, 1, 2}), rank);
    EXPECT_EQ(reducer.stats().iteration, 1);
  });
}

// static_graph: the first iteration only observes (everything launches at
// its end); later ones launch during backward, with the learned unused
// parameter ready at once.
TEST(Reducer, StaticGraphLearnsInTheFirstIterationAndOverlapsAfter) {
  spawn(2, [](int rank, StorePtr store) {
    Log log;
    auto pg = std::make_shared<RecordingGroup>(make_group(store, rank, 2), &log);
    Chain chain(&log);
    at::Tensor spare = at::ones({2}, at::kDouble).requires_grad_();
    std::vector<at::Tensor> params = chain.params;
    params.push_back(spare);
    Reducer reducer(params, {"w0", "w1", "w2", "spare"}, pg, one_per_bucket().static_graph(true));
    log.take();  // construction's checks across ranks
    for (int step = 0; step < 3; ++step) {
      chain.clear_grads();
      backward_step(reducer, chain, rank, step);
      Events events = without_status(log.take());
      if (step == 1) events.erase(events.begin());  // the rebuild's broadcast
      if (step == 0) {
        EXPECT_EQ(events, (Events{"grad w2", "grad w1", "grad w0", "allreduce 2", "allreduce 7",
                                  "allreduce 5", "allreduce 3"}));
      } else {
        // Rebuilt in the first iteration's order: the unused one last.
        EXPECT_EQ(events, (Events{"grad w2", "allreduce 7", "grad w1", "allreduce 5", "grad w0",
                                  "allreduce 3", "allreduce 2"}))
            << "step " << step;
      }
      expect_grads(chain, expected_average(2, {step}), rank);
      EXPECT_FALSE(spare.grad().defined());
      EXPECT_EQ(reducer.stats().unused_parameters, 1);
    }
  });
}

}  // namespace
}  // namespace ddp::testing
