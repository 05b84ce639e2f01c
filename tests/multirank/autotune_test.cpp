// Bucket autotuning in the Reducer, threads as ranks: every rank runs the
// same trials and settles on the same buckets, gradients stay exact through
// every rebuild (with gradient_as_bucket_view, static_graph,
// find_unused_parameters, a stateful comm hook, Join's shadow iterations),
// a failed trial iteration is not measured, and ranks that disagree on
// tuning stop at construction.
#include "reducer_fixtures.h"

#include "support/raised.h"

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace ddp::testing {
namespace {

constexpr int64_t MiB = 1 << 20;

// The chain's gradients arrive w2 (56 bytes), w1 (40), w0 (24). With the
// first bucket closed after one parameter, cap 0 cuts [w2] [w1] [w0] and
// 1 MiB cuts [w2] [w1 w0]: two layouts to try.
ReducerOptions tuned(int64_t preferred = 0) {
  return ReducerOptions()
      .first_bucket_cap_bytes(1)
      .bucket_cap_bytes(preferred)
      .autotune_caps_bytes({0, 1 * MiB})
      .autotune_iterations(8);
}

// A group on which w0's bucket alone (3 elements: cap 0 only; 1 MiB puts
// it with w1, 8 elements) takes 300 ms longer, so the tuner must pick
// 1 MiB: only a stall of most of a second in one of cap 0's samples (its
// spread is the noise the tuner allows for) could make up the gap.
class SlowGroup : public RecordingGroup {
 public:
  SlowGroup(ProcessGroupPtr inner, Log* log) : RecordingGroup(std::move(inner), log) {}

 protected:
  WorkPtr do_allreduce(at::Tensor t, ReduceOp op) override {
    if (t.numel() == 3 && t.scalar_type() == at::kDouble && op == ReduceOp::SUM) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    return RecordingGroup::do_allreduce(t, op);
  }
};

void step(Reducer& reducer, Chain& chain, int rank, int s, int skip = -1) {
  chain.clear_grads();
  backward_step(reducer, chain, rank, s, skip);
}

TEST(Autotune, RanksSettleOnTheFasterBucketsWithExactGradientsThroughEveryRebuild) {
  for (bool as_view : {false, true}) {
    for (int graph : {0, 1, 2}) {  // plain, static_graph, find_unused_parameters
      std::vector<BucketTuning> last(2);
      std::vector<std::vector<std::vector<size_t>>> layouts(2);
      spawn(2, [&](int rank, StorePtr store) {
        Log log;
        auto pg = std::make_shared<SlowGroup>(make_group(store, rank, 2), &log);
        Chain chain;
        Reducer reducer(chain.params, chain.names, pg,
                        tuned()
                            .gradient_as_bucket_view(as_view)
                            .static_graph(graph == 1)
                            .find_unused_parameters(graph == 2));
        int rebuilds = 0;
        for (int s = 0; s < 12; ++s) {
          step(reducer, chain, rank, s);
          expect_grads(chain, expected_average(2, {s}), rank);
          const IterationStats stats = reducer.stats();
          rebuilds += stats.buckets_rebuilt;
          EXPECT_NE(stats.bucket_tuning.phase, BucketTuning::Phase::kOff);
          EXPECT_LE(stats.bucket_tuning.trial_iterations, 8);
        }
        last[rank] = reducer.stats().bucket_tuning;
        layouts[rank] = reducer.bucket_indices();
        EXPECT_GE(rebuilds, 3) << "trials of both sizes, then the choice";
      });
      SCOPED_TRACE("as_view " + std::to_string(as_view) + " graph " + std::to_string(graph));
      EXPECT_EQ(last[0].phase, BucketTuning::Phase::kSettled);
      EXPECT_EQ(last[0].cap_bytes, 1 * MiB);
      EXPECT_EQ(last[0].samples, last[1].samples) << "every rank decides from the same times";
      EXPECT_EQ(last[0].cap_bytes, last[1].cap_bytes);
      EXPECT_EQ(layouts[0], layouts[1]);
      EXPECT_EQ(layouts[0].size(), 2u);
    }
  }
}

// Iterations the tuner measured (its trials) carry one small MAX allreduce
// each at their start; after it settles, nothing more than without tuning.
TEST(Autotune, OnlyTrialIterationsAddACollective) {
  spawn(2, [](int rank, StorePtr store) {
    Log log;
    auto pg = std::make_shared<RecordingGroup>(make_group(store, rank, 2), &log);
    Chain chain;
    Reducer reducer(chain.params, chain.names, pg, tuned());
    log.take();
    int settled_at = -1;
    for (int s = 0; s < 14; ++s) {
      step(reducer, chain, rank, s);
      const Events events = log.take();
      const auto timing = std::count(events.begin(), events.end(), "allreduce 2");
      const BucketTuning t = reducer.stats().bucket_tuning;
      if (t.phase == BucketTuning::Phase::kSettled && settled_at < 0) settled_at = s;
      // The timing allreduce comes from the second trial iteration on, up to
      // and including the one that settles.
      EXPECT_EQ(timing, s >= 2 && (settled_at < 0 || settled_at == s) ? 1 : 0) << "step " << s;
    }
    EXPECT_GT(settled_at, 0);
  });
}

// A hook that keeps memories per bucket index (PowerSGD with error feedback
// and warm start) sees GradBucket::layout change at every rebuild and
// drops them: no stale error of another size is applied.
TEST(Autotune, AStatefulCommHookSeesEachNewLayout) {
  spawn(2, [](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    Chain chain;
    Reducer reducer(chain.params, chain.names, pg, tuned());
    auto powersgd = std::make_shared<PowerSGDState>(pg, 1, /*start_powerSGD_iter=*/2);
    std::map<int64_t, std::set<int64_t>> sizes_by_layout;  // layout -> bucket sizes
    std::mutex mutex;
    reducer.register_comm_hook([&, powersgd](GradBucket& bucket) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        sizes_by_layout[bucket.layout()].insert(bucket.buffer().numel());
      }
      return powerSGD_hook(*powersgd, bucket);
    });
    int rebuilds = 0;
    for (int s = 0; s < 12; ++s) {
      step(reducer, chain, rank, s);
      rebuilds += reducer.stats().buckets_rebuilt;
      for (const auto& p : chain.params) EXPECT_TRUE(p.grad().isfinite().all().item<bool>());
    }
    EXPECT_EQ(reducer.stats().bucket_tuning.phase, BucketTuning::Phase::kSettled);
    EXPECT_EQ(static_cast<int>(sizes_by_layout.size()), 1 + rebuilds);
    EXPECT_EQ(sizes_by_layout.begin()->first, 0);
  });
}

// An iteration that fails on every rank (a parameter without a gradient on
// rank 1) is not measured; training goes on, the ranks still agree.
TEST(Autotune, AFailedTrialIterationIsNotMeasuredAndTrainingGoesOn) {
  std::vector<BucketTuning> last(2);
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    Chain chain;
    Reducer reducer(chain.params, chain.names, pg, tuned());
    for (int s = 0; s < 12; ++s) {
      if (s == 2) {  // the first measured trial
        EXPECT_THROW(step(reducer, chain, rank, s, rank == 1 ? 0 : -1), InvalidArgument);
        continue;
      }
      step(reducer, chain, rank, s);
      expect_grads(chain, expected_average(2, {s}), rank);
    }
    last[rank] = reducer.stats().bucket_tuning;
  });
  EXPECT_EQ(last[0].phase, BucketTuning::Phase::kSettled);
  EXPECT_EQ(last[0].samples, last[1].samples);
  EXPECT_EQ(last[0].cap_bytes, last[1].cap_bytes);
  // The failed measurement of cap 0 ran again; every later one counted
  // (bucket_tuner_test.cpp has the schedule): 4 samples in 8 iterations,
  // where 7 give 4 without the failure.
  EXPECT_EQ(last[0].samples.size(), 4u);
  EXPECT_EQ(last[0].trial_iterations, 8);
}

// Rank 1 runs out of inputs and shadows (Join) while rank 0 trains on:
// the tuner's collectives stay in step, rank 0's gradients are its own
// halved (rank 1 contributes zeros).
TEST(Autotune, JoinsShadowIterationsKeepTheTrialsInStep) {
  std::vector<std::vector<std::vector<size_t>>> layouts(2);
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    Chain chain;
    Reducer reducer(chain.params, chain.names, pg, tuned());
    for (int s = 0; s < 12; ++s) {
      if (rank == 1 && s >= 3) {
        reducer.shadow_iteration();
        continue;
      }
      step(reducer, chain, rank, s);
      if (rank == 0 && s >= 3) {
        Chain local;
        local.forward(Chain::input(0, s)).sum().backward();
        for (size_t i = 0; i < 3; ++i) {
          EXPECT_TRUE(
              at::allclose(chain.params[i].grad(), local.params[i].grad() / 2, 1e-13, 1e-13))
              << "step " << s << " " << chain.names[i];
        }
      }
    }
    layouts[rank] = reducer.bucket_indices();
  });
  EXPECT_EQ(layouts[0], layouts[1]);
}

TEST(Autotune, RanksThatDisagreeOnTuningStopAtConstruction) {
  spawn(2, [](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2);
    Chain chain;
    ReducerOptions options = rank == 0 ? tuned() : ReducerOptions();
    Raised r =
        raised<InvalidArgument>([&] { Reducer reducer(chain.params, chain.names, pg, options); });
    EXPECT_TRUE(r) << "rank " << rank << ": " << r;
    EXPECT_TRUE(r.on(*pg)) << r;
    EXPECT_TRUE(r.mentions("bucket_cap_mb \"auto\"")) << r;  // the option that differs
  });
}

TEST(Autotune, RanksWithDifferentBucketSizesStopAtConstruction) {
  spawn(2, [](int rank, StorePtr store) {
    Chain chain;
    const int64_t cap = rank == 0 ? 25 * MiB : 40 * MiB;
    Raised r = raised<InvalidArgument>([&] {
      Reducer reducer(chain.params, chain.names, make_group(store, rank, 2),
                      ReducerOptions().bucket_cap_bytes(cap));
    });
    EXPECT_TRUE(r) << "rank " << rank << ": " << r;
    EXPECT_EQ(r.context.rank, rank) << r;
    EXPECT_EQ(r.context.world_size, 2) << r;
    EXPECT_TRUE(r.mentions(std::to_string(cap))) << r;  // this rank's bucket size
  });
}

TEST(Autotune, ABudgetTooSmallForTheSizesIsAnError) {
  spawn(1, [](int rank, StorePtr store) {
    Chain chain;
    EXPECT_THROW(Reducer(chain.params, chain.names, make_group(store, rank, 1),
                         tuned().autotune_iterations(3)),
                 InvalidArgument);
  });
}

}  // namespace
}  // namespace ddp::testing
