// The hierarchical group on threads as ranks, hosts assigned by label: the
// sliced path (every host the same size), the leaders' path (hosts of
// different sizes), element counts that do not divide, several all-reduces
// in flight, and the collectives that run on the flat group.
#include "spawn.h"
#include "support/raised.h"

#include "collectives/hierarchical/topology.h"

#include <ddp/ddp.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace ddp::testing {
namespace {

// A hierarchical group with local backend `local` (gloo where shm is absent).
ProcessGroupPtr hierarchical(StorePtr store, int rank, const std::vector<std::string>& hosts,
                             const std::string& local) {
  BackendSetup setup;
  setup.store = store;
  setup.rank = rank;
  setup.world_size = static_cast<int>(hosts.size());
  setup.timeout = std::chrono::seconds(60);
  return std::make_shared<HierarchicalProcessGroup>(setup, hosts,
                                                    HierarchicalOptions().local_backend(local));
}

std::string local_backend() {
  auto names = backend_names();
  return std::find(names.begin(), names.end(), "shm") != names.end() ? "shm" : "gloo";
}

void check_allreduces(const std::vector<std::string>& hosts) {
  const int size = static_cast<int>(hosts.size());
  spawn(size, [&](int rank, StorePtr store) {
    auto pg = hierarchical(store, rank, hosts, local_backend());
    for (int64_t n : {0, 1, 7, 1000, 1 << 20}) {
      for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kInt}) {
        at::Tensor t = (at::arange(n, at::kLong) % 7 + rank).to(dtype);
        pg->allreduce(t, ReduceOp::SUM)->wait();
        at::Tensor want = (at::arange(n, at::kLong) % 7 * size + size * (size - 1) / 2).to(dtype);
        ASSERT_TRUE(at::equal(t, want)) << "SUM n=" << n << " " << c10::toString(dtype);
        at::Tensor m = (at::arange(n, at::kLong) % 5 + rank).to(dtype);
        pg->allreduce(m, ReduceOp::MAX)->wait();
        ASSERT_TRUE(at::equal(m, (at::arange(n, at::kLong) % 5 + size - 1).to(dtype)));
      }
      at::Tensor a = at::full({n}, rank + 1.0, at::kDouble);
      pg->allreduce(a, ReduceOp::AVG)->wait();
      ASSERT_TRUE(at::allclose(a, at::full({n}, (size + 1) / 2.0, at::kDouble)));
    }
  });
}

// Each sub-group's members in group-rank order: what every rank builds its
// groups from, and what an MPI sub-communicator is made of.
TEST(Hierarchical, TopologyNamesEverySubGroupsMembers) {
  const std::vector<std::string> interleaved = {"a", "b", "c", "a", "b", "c"};
  detail::Topology t = detail::topology_of(interleaved, 4);
  EXPECT_EQ(t.host_index, 1);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_TRUE(t.uniform);
  EXPECT_EQ(t.host_ranks, (std::vector<int>{1, 4}));
  EXPECT_EQ(t.peers, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(t.leaders, (std::vector<int>{0, 1, 2}));
  for (int rank = 0; rank < 6; ++rank) {  // rank r is at its own place in each of its groups
    detail::Topology u = detail::topology_of(interleaved, rank);
    EXPECT_EQ(u.host_ranks.at(u.local_rank), rank);
    EXPECT_EQ(u.peers.at(u.host_index), rank);
  }
  detail::Topology uneven = detail::topology_of({"x", "y", "x"}, 2);
  EXPECT_FALSE(uneven.uniform);
  EXPECT_EQ(uneven.host_ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(uneven.local_rank, 1);
  EXPECT_TRUE(uneven.peers.empty());
  EXPECT_EQ(uneven.leaders, (std::vector<int>{0, 1}));
}

// A rank composing other parts (DDP_CROSS_BACKEND set on some ranks only)
// is refused on every rank, naming both compositions, before any part is
// built.
TEST(Hierarchical, RanksComposingOtherPartsAreRefusedOnEveryRank) {
  spawn(2, [&](int rank, StorePtr store) {
    BackendSetup setup;
    setup.store = store;
    setup.rank = rank;
    setup.world_size = 2;
    setup.timeout = std::chrono::seconds(60);
    auto options =
        HierarchicalOptions().local_backend(local_backend()).cross_backend(rank ? "shm" : "gloo");
    Raised r = raised([&] { HierarchicalProcessGroup pg(setup, {"a", "b"}, options); });
    EXPECT_TRUE(r) << "rank " << rank << " built a group of mismatched parts: " << r;
    EXPECT_EQ(r.context.rank, rank) << r;
    EXPECT_EQ(r.context.world_size, 2) << r;
    EXPECT_EQ(r.context.peers, std::vector<int>{1 - rank}) << r;  // the other composition's
    // Both compositions, and the variable that chooses the cross-host part.
    EXPECT_TRUE(r.mentions(local_backend() + "+gloo")) << r;
    EXPECT_TRUE(r.mentions(local_backend() + "+shm")) << r;
    EXPECT_TRUE(r.mentions("DDP_CROSS_BACKEND")) << r;
  });
}

TEST(Hierarchical, EqualHostsSliceAcrossHosts) { check_allreduces({"a", "a", "b", "b"}); }

TEST(Hierarchical, ThreeHostsOfTwo) { check_allreduces({"a", "b", "c", "a", "b", "c"}); }

TEST(Hierarchical, HostsOfDifferentSizesGoThroughLeaders) {
  check_allreduces({"a", "a", "a", "b"});
}

TEST(Hierarchical, ManyInFlightCompleteInOrderWithRightSums) {
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  spawn(4, [&](int rank, StorePtr store) {
    auto pg = hierarchical(store, rank, hosts, local_backend());
    std::vector<at::Tensor> tensors;
    std::vector<WorkPtr> works;
    std::mutex mutex;
    std::vector<int> order;
    for (int i = 0; i < 40; ++i) {
      tensors.push_back(at::full({1000 + i * 37}, i + rank, at::kFloat));
      works.push_back(pg->allreduce(tensors.back()));
      works.back()->on_complete([&, i] {
        std::lock_guard<std::mutex> lock(mutex);
        order.push_back(i);
      });
    }
    for (auto& w : works) w->wait();
    for (int i = 0; i < 40; ++i) {
      ASSERT_TRUE(at::equal(tensors[i], at::full({1000 + i * 37}, 4.0 * i + 6, at::kFloat)));
    }
    std::lock_guard<std::mutex> lock(mutex);
    for (int i = 0; i < 40; ++i) ASSERT_EQ(order[i], i);
  });
}

TEST(Hierarchical, CoalescedAndTheFlatCollectives) {
  const std::vector<std::string> hosts = {"a", "a", "b", "b", "b"};
  spawn(5, [&](int rank, StorePtr store) {
    auto pg = hierarchical(store, rank, hosts, local_backend());
    std::vector<at::Tensor> ts = {at::full({3}, rank * 1.0), at::full({5}, 2.0 * rank)};
    pg->allreduce_coalesced(ts)->wait();
    ASSERT_TRUE(at::equal(ts[0], at::full({3}, 10.0)));
    ASSERT_TRUE(at::equal(ts[1], at::full({5}, 20.0)));
    at::Tensor b = at::full({4}, rank * 1.0);
    pg->broadcast(b, 3)->wait();
    ASSERT_TRUE(at::equal(b, at::full({4}, 3.0)));
    std::vector<at::Tensor> all;
    for (int r = 0; r < 5; ++r) all.push_back(at::empty({2}));
    pg->allgather(all, at::full({2}, rank * 1.0))->wait();
    for (int r = 0; r < 5; ++r) ASSERT_TRUE(at::equal(all[r], at::full({2}, r * 1.0)));
    pg->barrier()->wait();
    auto h = std::dynamic_pointer_cast<HierarchicalProcessGroup>(pg);
    EXPECT_EQ(h->host_count(), 2);
    EXPECT_EQ(h->local_size(), rank < 2 ? 2 : 3);
  });
}

}  // namespace
}  // namespace ddp::testing
