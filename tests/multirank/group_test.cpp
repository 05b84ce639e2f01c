// Process-group behaviour beyond single results: many operations in flight,
// completion order, worker threads, round-robin groups, Gloo's algorithms,
// the DDP_DEBUG=detail fingerprint check, timeouts and misuse.
#include "spawn.h"
#include "support/error_of.h"

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
    try {
      pg->allreduce(bad);
      FAIL() << "mismatch not detected on rank " << rank;
    } catch (const CollectiveMismatch& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("rank 0: allreduce #2 (SUM, Float, 1000 elements)"), std::string::npos)
          << what;
      EXPECT_NE(what.find("rank 1: allreduce #2 (SUM, Float, 999 elements)"), std::string::npos)
          << what;
    }
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
    try {
      work->wait(milliseconds(200));
      FAIL() << "wait returned";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("allreduce #0"), std::string::npos) << e.what();
    }
    // Gloo's own timeout then fails the Work and breaks the group.
    EXPECT_THROW(work->wait(milliseconds(10000)), TimeoutError);
    try {
      pg->allreduce(t)->wait();
      FAIL() << "a broken group ran a collective";
    } catch (const CommunicationError& e) {
      EXPECT_NE(std::string(e.what()).find("group is broken"), std::string::npos) << e.what();
    }
  });
}

TEST(ProcessGroup, RendezvousTimeoutSaysWhoArrived) {
  StorePtr store = c10::make_intrusive<c10d::HashStore>();
  try {
    new_process_group(store, 0, 3, InitOptions().timeout(milliseconds(300)));
    FAIL() << "rendezvous with 1 of 3 ranks succeeded";
  } catch (const TimeoutError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("1 of 3 ranks arrived (missing: 1, 2)"), std::string::npos) << what;
  }
}

TEST(ProcessGroup, MisuseIsReportedWithRankAndArgument) {
  spawn(1, [](int rank, StorePtr store) {
    auto pg = make_group("gloo", store, rank, 1);
    at::Tensor t = at::ones({4, 4});
    EXPECT_NE(error_of([&] {
                pg->allreduce(t.t());
              }).find("rank 0 of 1 [gloo]: allreduce: tensor must be contiguous"),
              std::string::npos);
    EXPECT_NE(error_of([&] { pg->allreduce(at::ones({2}, at::kBool)); }).find("dtype Bool"),
              std::string::npos);
    EXPECT_NE(error_of([&] { pg->broadcast(t, 3); }).find("root 3 is outside [0, 1)"),
              std::string::npos);
    EXPECT_NE(error_of([&] { pg->allgather({}, t); }).find("outputs has 0 tensors"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                pg->allgather({at::ones({3})}, t);
              }).find("outputs[0] has 3 elements but input has 16"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                pg->allreduce_coalesced({t, at::ones({2}, at::kDouble)});
              }).find("tensors[1] has dtype Double but tensors[0] has Float"),
              std::string::npos);
    EXPECT_NE(error_of([&] { pg->allreduce(at::Tensor()); }).find("undefined"), std::string::npos);
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
