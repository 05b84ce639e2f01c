// Process-group behaviour beyond single results: many operations in flight,
// completion order, worker threads, round-robin groups, Gloo's algorithms,
// the DDP_DEBUG=detail fingerprint check, timeouts and misuse.
#include "spawn.h"
#include "support/raised.h"

#include <ddp/ddp.h>

#include "collectives/checked_process_group.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <future>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

namespace ddp::testing {
namespace {

using std::chrono::milliseconds;

// Issues `count` allreduces of different sizes without waiting, records the
// order in which their Works complete, then checks order and results.
void many_in_flight(const ProcessGroupPtr& pg, int count) {
  std::vector<at::Tensor> tensors;
  std::vector<WorkPtr> works;
  std::mutex mutex;
  std::vector<int> completion_order;
  for (int i = 0; i < count; ++i) {
    // Sizes vary so that later operations could finish first if unordered.
    tensors.push_back(at::full({(i % 4 == 0) ? 1 << 18 : 1 + i}, pg->rank() + i, at::kFloat));
    works.push_back(pg->allreduce(tensors.back()));
    works.back()->on_complete([&, i] {
      std::lock_guard<std::mutex> lock(mutex);
      completion_order.push_back(i);
    });
  }
  for (auto& w : works) w->wait();
  const int n = pg->size();
  for (int i = 0; i < count; ++i) {
    const float want = static_cast<float>(n * (n - 1) / 2 + n * i);
    ASSERT_TRUE(at::all(tensors[i] == want).item<bool>()) << "operation " << i;
  }
  // wait() returns once a Work's callbacks have run: all are recorded.
  std::lock_guard<std::mutex> lock(mutex);
  ASSERT_EQ(completion_order.size(), static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) ASSERT_EQ(completion_order[i], i);
}

TEST(ProcessGroup, ManyInFlightCompleteInIssueOrder) {
  spawn(3,
        [](int rank, StorePtr store) { many_in_flight(make_group("gloo", store, rank, 3), 64); });
}

TEST(ProcessGroup, SeveralWorkerThreadsKeepIssueOrder) {
  spawn(4, [](int rank, StorePtr store) {
    auto options = InitOptions().backend("gloo").backend_options(
        std::make_shared<GlooOptions>(GlooOptions().threads(4)));
    many_in_flight(make_group(store, rank, 4, options), 64);
  });
}

TEST(ProcessGroup, RoundRobinDispatchesToEveryGroupInTurn) {
  spawn(3, [](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 3, InitOptions().backend("gloo").round_robin_groups(3));
    auto rr = std::dynamic_pointer_cast<RoundRobinProcessGroup>(pg);
    ASSERT_TRUE(rr);
    ASSERT_EQ(rr->groups().size(), 3u);
    EXPECT_EQ(pg->backend_name(), "round_robin(3xgloo)");
    many_in_flight(pg, 30);
    pg->barrier()->wait();
  });
}

// Several groups of one backend built on one store (new_process_group
// twice and more, round-robin ones too): each has keys of its own, so they
// neither meet each other's members nor share counters. Used interleaved,
// each all-reduce sums only its own group's contributions.
TEST(ProcessGroup, SeveralGroupsOfEachBackendOnOneStore) {
  for (const std::string& backend : backend_names()) {
    const bool threads_as_ranks = backend != "mpi" && backend != "nccl" && backend != "auto";
    if (!threads_as_ranks) continue;
    SCOPED_TRACE(backend);
    spawn(3, [&](int rank, StorePtr store) {
      std::vector<ProcessGroupPtr> groups;
      for (int g = 0; g < 3; ++g) {
        InitOptions options = InitOptions().backend(backend).timeout(std::chrono::seconds(60));
        groups.push_back(new_process_group(store, rank, 3, options.round_robin_groups(1 + g % 2)));
      }
      for (int round = 0; round < 3; ++round) {
        std::vector<at::Tensor> tensors;
        std::vector<WorkPtr> works;
        for (int g = 0; g < 3; ++g) {
          tensors.push_back(at::full({1 << 12}, 100.0 * g + rank + round, at::kDouble));
          works.push_back(groups[g]->allreduce(tensors.back()));
        }
        for (int g = 0; g < 3; ++g) {
          works[g]->wait();
          const double want = 3 * (100.0 * g + round) + (0 + 1 + 2);
          ASSERT_TRUE(at::equal(tensors[g], at::full({1 << 12}, want, at::kDouble)))
              << "group " << g << " round " << round << ": got " << tensors[g][0].item<double>()
              << ", want " << want;
        }
      }
    });
  }
}

TEST(ProcessGroup, RoundRobinRejectsGroupsOfDifferentRanks) {
  spawn(2, [](int rank, StorePtr store) {
    auto a = make_group("gloo", store, rank, 2);
    auto solo_store = c10::make_intrusive<c10d::PrefixStore>("solo" + std::to_string(rank), store);
    auto b = make_group("gloo", solo_store, 0, 1);
    EXPECT_THROW(RoundRobinProcessGroup({a, b}), InvalidArgument);
  });
}

TEST(ProcessGroup, BcubeAlgorithmGivesTheSameSums) {
  for (int size : {2, 4, 5}) {
    spawn(size, [size](int rank, StorePtr store) {
      auto options = InitOptions().backend("gloo").backend_options(
          std::make_shared<GlooOptions>(GlooOptions().algorithm(GlooOptions::Algorithm::BCUBE)));
      auto pg = make_group(store, rank, size, options);
      at::Tensor t = at::arange(100000, at::kDouble) * (rank + 1);
      pg->allreduce(t)->wait();
      EXPECT_TRUE(at::equal(t, at::arange(100000, at::kDouble) * (size * (size + 1) / 2)));
    });
  }
}

TEST(ProcessGroup, DebugModeNamesWhatEachRankIssued) {
  spawn(3, [](int rank, StorePtr store) {
    auto pg = std::make_shared<detail::CheckedProcessGroup>(make_group("gloo", store, rank, 3));
    at::Tensor ok = at::ones({10});
    pg->allreduce(ok)->wait();  // matching collectives pass
    EXPECT_TRUE(at::all(ok == 3).item<bool>());
    at::Tensor bad = at::ones({rank == 1 ? 999 : 1000});
    // Every rank names rank 1 (the one that differs) and what each issued.
    Raised r = raised<CollectiveMismatch>([&] { pg->allreduce(bad); });
    ASSERT_TRUE(r) << "mismatch not detected on rank " << rank << ": " << r;
    EXPECT_EQ(r.context.rank, rank) << r;
    EXPECT_EQ(r.context.world_size, 3) << r;
    EXPECT_EQ(r.context.peers, std::vector<int>{1}) << r;
    EXPECT_TRUE(r.mentions("allreduce")) << r;
    EXPECT_TRUE(r.mentions("1000")) << r;
    EXPECT_TRUE(r.mentions("999")) << r;
    // Different kinds and dtypes are caught too.
    at::Tensor t = at::ones({4}, rank == 2 ? at::kDouble : at::kFloat);
    EXPECT_THROW(rank == 0 ? pg->broadcast(t, 0) : pg->allreduce(t), CollectiveMismatch);
  });
}

TEST(ProcessGroup, WaitTimesOutWhenAPeerNeverJoins) {
  std::promise<void> rank0_done;
  std::shared_future<void> done = rank0_done.get_future().share();
  spawn(2, [&](int rank, StorePtr store) {
    auto pg = make_group(store, rank, 2, InitOptions().backend("gloo").timeout(milliseconds(1500)));
    if (rank == 1) {  // stays connected but never issues the collective
      done.wait_for(std::chrono::seconds(30));
      return;
    }
    struct Release {
      std::promise<void>& p;
      ~Release() { p.set_value(); }
    } release{rank0_done};
    at::Tensor t = at::ones({4});
    auto work = pg->allreduce(t);
    // The Work's own wait: this rank's, about the first allreduce; it
    // names the time waited.
    Raised waited = raised<TimeoutError>([&] { work->wait(milliseconds(200)); });
    ASSERT_TRUE(waited) << waited;
    EXPECT_EQ(waited.context.rank, 0) << waited;
    EXPECT_EQ(waited.context.world_size, 2) << waited;
    EXPECT_EQ(waited.context.backend, "gloo") << waited;
    EXPECT_EQ(waited.context.operation.rfind("allreduce #0", 0), 0u) << waited;
    EXPECT_TRUE(waited.mentions("200")) << waited;
    // Gloo's own timeout then fails the Work and breaks the group.
    EXPECT_THROW(work->wait(milliseconds(10000)), TimeoutError);
    // A later collective fails with the cause: rank 1, which never joined.
    Raised broken = raised<CommunicationError>([&] { pg->allreduce(t)->wait(); });
    ASSERT_TRUE(broken) << "a broken group ran a collective: " << broken;
    EXPECT_EQ(broken.context.rank, 0) << broken;
    EXPECT_EQ(broken.context.peers, std::vector<int>{1}) << broken;
  });
}

TEST(ProcessGroup, RendezvousTimeoutSaysWhoArrived) {
  StorePtr store = c10::make_intrusive<c10d::HashStore>();
  Raised r = raised<TimeoutError>(
      [&] { new_process_group(store, 0, 3, InitOptions().timeout(milliseconds(300))); });
  ASSERT_TRUE(r) << "rendezvous with 1 of 3 ranks: " << r;
  EXPECT_EQ(r.context.rank, 0) << r;
  EXPECT_EQ(r.context.world_size, 3) << r;
  EXPECT_EQ(r.context.peers, (std::vector<int>{1, 2})) << r;  // the missing ranks
}

TEST(ProcessGroup, MisuseIsReportedWithRankAndArgument) {
  spawn(1, [](int rank, StorePtr store) {
    auto pg = make_group("gloo", store, rank, 1);
    at::Tensor t = at::ones({4, 4});
    // Each misuse: rank, group, backend and the operation, and the argument.
    auto misuse = [&](const char* operation, const std::function<void()>& call) {
      Raised r = raised(call);
      EXPECT_TRUE(r) << operation << ": " << r;
      EXPECT_EQ(r.context.rank, 0) << r;
      EXPECT_EQ(r.context.world_size, 1) << r;
      EXPECT_EQ(r.context.backend, "gloo") << r;
      EXPECT_EQ(r.context.operation, operation) << r;
      return r;
    };
    Raised r = misuse("allreduce", [&] { pg->allreduce(t.t()); });
    EXPECT_TRUE(r.mentions("tensor")) << r;
    r = misuse("allreduce", [&] { pg->allreduce(at::ones({2}, at::kBool)); });
    EXPECT_TRUE(r.mentions("Bool")) << r;
    r = misuse("broadcast", [&] { pg->broadcast(t, 3); });
    EXPECT_TRUE(r.mentions("root 3")) << r;
    r = misuse("allgather", [&] { pg->allgather({}, t); });
    EXPECT_TRUE(r.mentions("outputs")) << r;
    r = misuse("allgather", [&] { pg->allgather({at::ones({3})}, t); });
    EXPECT_TRUE(r.mentions("outputs[0]") && r.mentions("3") && r.mentions("16")) << r;
    r = misuse("allreduce_coalesced", [&] {
      pg->allreduce_coalesced({t, at::ones({2}, at::kDouble)});
    });
    EXPECT_TRUE(r.mentions("tensors[1]") && r.mentions("Double") && r.mentions("Float")) << r;
    r = misuse("allreduce", [&] { pg->allreduce(at::Tensor()); });
    EXPECT_TRUE(r.mentions("tensor")) << r;
  });
}

TEST(ProcessGroup, ZeroElementsAndWorldOfOneComplete) {
  spawn(1, [](int rank, StorePtr store) {
    auto pg = make_group("gloo", store, rank, 1);
    at::Tensor t = at::full({5}, 3.0);
    pg->allreduce(t, ReduceOp::AVG)->wait();
    EXPECT_TRUE(at::all(t == 3.0).item<bool>());
    pg->allreduce(at::empty({0}))->wait();
    pg->barrier()->wait();
  });
}

}  // namespace
}  // namespace ddp::testing
