// The Reducer on its own, threads as ranks (issue 14): bucket readiness and
// launch order, rebuild, unused parameters, no_sync, static graph and the
// error paths, in seconds rather than through multi-process runs.
//
// The model is a chain of three double parameters of distinct sizes, so a
// bucket's allreduce names its parameter by element count:
//   y = x * w0 (3)  ->  z = sum(y) * w1 (5)  ->  u = sum(z) * w2 (7),  loss = sum(u)
// Backward produces w2's gradient first, then w1's, then w0's.
#include "spawn.h"

#include <ddp/ddp.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ddp::testing {
namespace {

using Events = std::vector<std::string>;

// What happened on one rank, in order, from the autograd thread and the
// collectives' callers.
class Log {
 public:
  void add(std::string event) {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
  }
  Events take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(events_, {});
  }

 private:
  std::mutex mutex_;
  Events events_;  // guarded by mutex_
};

// A real group that logs each allreduce as its caller issues it.
class RecordingGroup : public ProcessGroup {
 public:
  RecordingGroup(ProcessGroupPtr inner, Log* log)
      : ProcessGroup(inner->rank(), inner->size(), inner->timeout()), inner_(inner), log_(log) {}
  std::string backend_name() const override { return "recording"; }

 protected:
  WorkPtr do_allreduce(at::Tensor t, ReduceOp op) override {
    log_->add("allreduce " + std::to_string(t.numel()));
    return inner_->allreduce(t, op);
  }
  WorkPtr do_allreduce_coalesced(std::vector<at::Tensor> ts, ReduceOp op) override {
    return inner_->allreduce_coalesced(std::move(ts), op);
  }
  WorkPtr do_broadcast(at::Tensor t, int root) override {
    log_->add("broadcast " + std::to_string(t.numel()));
    return inner_->broadcast(t, root);
  }
  WorkPtr do_allgather(std::vector<at::Tensor> outs, at::Tensor in) override {
    return inner_->allgather(std::move(outs), in);
  }
  WorkPtr do_reduce_scatter(at::Tensor out, std::vector<at::Tensor> ins, ReduceOp op) override {
    return inner_->reduce_scatter(out, std::move(ins), op);
  }
  WorkPtr do_barrier() override { return inner_->barrier(); }

 private:
  ProcessGroupPtr inner_;
  Log* log_;
};

struct Chain {
  std::vector<at::Tensor> params;  // w0, w1, w2
  std::vector<std::string> names{"w0", "w1", "w2"};

  explicit Chain(Log* log = nullptr) {
    for (int64_t n : {3, 5, 7}) {
      params.push_back(at::linspace(0.1, 0.1 * n, n, at::kDouble).requires_grad_());
    }
    if (log) {
      for (size_t i = 0; i < params.size(); ++i) {
        params[i].register_hook([log, name = names[i]](const at::Tensor&) {
          log->add("grad " + name);
        });
      }
    }
  }
  // This rank's input: different on every rank and in every step.
  static at::Tensor input(int rank, int step) {
    return at::arange(1, 4, at::kDouble) * (rank + 1) + step;
  }
  // `skip` leaves that parameter out of the graph (a constant instead).
  at::Tensor forward(const at::Tensor& x, int skip = -1) const {
    auto w = [&](int i) { return i == skip ? params[i].detach() : params[i]; };
    at::Tensor y = x * w(0);
    at::Tensor z = y.sum() * w(1);
    return z.sum() * w(2);
  }
};

// Each rank's local gradients for `steps` (accumulated), averaged over ranks:
// what a synchronized backward must leave in every rank's .grad.
std::vector<at::Tensor> expected_average(int size, const std::vector<int>& steps,
                                         int skip_on_rank1 = -1) {
  std::vector<at::Tensor> sum;
  for (int r = 0; r < size; ++r) {
    Chain local;
    for (int step : steps) {
      local.forward(Chain::input(r, step), r == 1 ? skip_on_rank1 : -1).sum().backward();
    }
    for (size_t i = 0; i < local.params.size(); ++i) {
      at::Tensor g = local.params[i].grad().defined() ? local.params[i].grad()
                                                      : at::zeros_like(local.params[i]);
      if (sum.size() <= i) sum.push_back(g.clone()); else sum[i] += g;
    }
  }
  for (auto& s : sum) s /= size;
  return sum;
}

void expect_grads(const Chain& chain, const std::vector<at::Tensor>& expected, int rank) {
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_TRUE(chain.params[i].grad().defined()) << "rank " << rank << " " << chain.names[i];
    EXPECT_TRUE(at::allclose(chain.params[i].grad(), expected[i], 1e-13, 1e-13))
        << "rank " << rank << " " << chain.names[i] << ": " << chain.params[i].grad()
        << " expected " << expected[i];
  }
}

// One bucket per parameter.
ReducerOptions one_per_bucket() {
  return ReducerOptions().bucket_cap_bytes(1).first_bucket_cap_bytes(1);
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The end-of-backward status allreduce (iteration_status.h): any allreduce
// whose size is none of the parameters' (3, 5, 7, and 2 for a spare one).
bool is_status(const std::string& e) {
  if (e.rfind("allreduce ", 0) != 0) return false;
  const std::string n = e.substr(10);
  return n != "2" && n != "3" && n != "5" && n != "7";
}

Events without_status(Events events) {
  events.erase(std::remove_if(events.begin(), events.end(), is_status), events.end());
  return events;
}

TEST(Reducer, BucketsLaunchInOrderAsSoonAsReadyDuringBackward) {
  for (bool as_view : {false, true}) {
    spawn(2, [as_view](int rank, StorePtr store) {
      Log log;
      auto pg = std::make_shared<RecordingGroup>(make_group(store, rank, 2), &log);
      Chain chain(&log);
      Reducer reducer(chain.params, chain.names, pg,
                      one_per_bucket().gradient_as_bucket_view(as_view));
      EXPECT_EQ(reducer.bucket_indices(), (std::vector<std::vector<size_t>>{{2}, {1}, {0}}));
      at::Tensor out = chain.forward(Chain::input(rank, 0));
      reducer.prepare_for_backward({out});
      out.sum().backward();
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
    at::Tensor out = chain.forward(Chain::input(rank, 0));
    reducer.prepare_for_backward({out});
    out.sum().backward();
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
    at::Tensor out = chain.forward(Chain::input(rank, 0));
    reducer.prepare_for_backward({out});
    out.sum().backward();
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
      EXPECT_EQ(reducer.bucket_indices(), (std::vector<std::vector<size_t>>{{2}, {1}, {0}}));
      for (int step = 0; step < 2; ++step) {
        for (auto& p : chain.params) p.mutable_grad() = at::Tensor();
        at::Tensor out = chain.forward(Chain::input(rank, step));
        reducer.prepare_for_backward({out});
        out.sum().backward();
        Events events = without_status(log.take());
        if (step == 1 && !find_unused) {
          EXPECT_TRUE(reducer.stats().buckets_rebuilt);
          EXPECT_EQ(events.front(), "broadcast 3") << "rank 0's order, on every rank";
          events.erase(events.begin());
        }
        if (step == 0 || find_unused) {
          EXPECT_FALSE(reducer.stats().buckets_rebuilt);
          EXPECT_EQ(events, (Events{"grad w2", "grad w1", "allreduce 5", "grad w0",
                                    "allreduce 3", "allreduce 7"}));
        } else {
          EXPECT_EQ(events, (Events{"grad w2", "allreduce 7", "grad w1", "allreduce 5",
                                    "grad w0", "allreduce 3"}));
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
    at::Tensor out = chain.forward(Chain::input(rank, 0), rank == 1 ? 0 : -1);
    reducer.prepare_for_backward({out});
    out.sum().backward();
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
    for (int step = 0; step < 3; ++step) {
      at::Tensor out = chain.forward(Chain::input(rank, step));
      reducer.prepare_for_backward({out}, /*synchronize=*/step == 2);
      out.sum().backward();
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
    Reducer reducer(params, {"w0", "w1", "w2", "spare"}, pg,
                    one_per_bucket().static_graph(true));
    for (int step = 0; step < 3; ++step) {
      for (auto& p : chain.params) p.mutable_grad() = at::Tensor();
      at::Tensor out = chain.forward(Chain::input(rank, step));
      reducer.prepare_for_backward({out});
      out.sum().backward();
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

TEST(Reducer, AParameterWithoutGradientOnOneRankIsAnErrorOnEveryRank) {
  spawn(2, [](int rank, StorePtr store) {
    Chain chain;
    Reducer reducer(chain.params, chain.names, make_group(store, rank, 2));
    for (auto& p : chain.params) p.mutable_grad() = at::full_like(p, 9.0);
    at::Tensor out = chain.forward(Chain::input(rank, 0), rank == 1 ? 0 : -1);
    reducer.prepare_for_backward({out});
    std::string m = message_of([&] { out.sum().backward(); });
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
    std::string m = message_of([&] { out.sum().backward(); });
    EXPECT_TRUE(contains(m, "different numbers of forward passes")) << m;
    EXPECT_TRUE(contains(m, "rank 1 ran a forward whose backward() was skipped")) << m;

    // Rank 0 runs backward() twice after one forward: reported in the next iteration.
    out = chain.forward(Chain::input(rank, 1));
    reducer.prepare_for_backward({out});
    out.sum().backward({}, /*retain_graph=*/rank == 0);
    if (rank == 0) out.sum().backward();
    out = chain.forward(Chain::input(rank, 2));
    reducer.prepare_for_backward({out});
    m = message_of([&] { out.sum().backward(); });
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
    std::string m = message_of([&] {
      reducer.register_comm_hook([](GradBucket& b) { return completed_future(b.buffer()); });
    });
    EXPECT_TRUE(contains(m, "training has started")) << m;
  });
}

}  // namespace
}  // namespace ddp::testing
