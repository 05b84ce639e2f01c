// What is particular to the shm backend (the sweep in collectives_test.cpp
// runs every collective on it too): chunk and slice boundaries, many
// operations in flight through a small ring, identical bits on every rank,
// the segment's name gone once the group is up, peers that leave or stall.
#include "shm_fixtures.h"
#include "spawn.h"
#include "support/raised.h"

#include <ddp/backends/gloo.h>
#include <ddp/backends/shm.h>
#include <ddp/ddp.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <unistd.h>

namespace ddp::testing {
namespace {

using std::chrono::milliseconds;

TEST(Shm, EveryBoundaryOfChunksSlicesAndSlots) {
  const std::vector<int64_t> counts = {1,   15,   16,   17,   255,  256,
                                       257, 1023, 1024, 1025, 5000, 100003};
  for (int size : {2, 3, 5}) {
    spawn(size, [&](int rank, StorePtr store) {
      auto pg = shm_group(store, rank, size);
      for (int64_t n : counts) {
        for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kByte}) {
          const std::string what = "world " + std::to_string(size) + " n=" + std::to_string(n) +
                                   " " + c10::toString(dtype);
          at::Tensor idx = at::arange(n, at::kLong);
          at::Tensor t = ((idx + rank) % 3).to(dtype);
          pg->allreduce(t, ReduceOp::SUM)->wait();
          at::Tensor want = at::zeros({n}, at::kLong);
          for (int r = 0; r < size; ++r) want += (idx + r) % 3;
          ASSERT_TRUE(at::equal(t.to(at::kLong), want)) << "allreduce " << what;

          at::Tensor b = (idx * (rank + 1) % 7).to(dtype);
          pg->broadcast(b, size - 1)->wait();
          ASSERT_TRUE(at::equal(b.to(at::kLong), idx * size % 7)) << "broadcast " << what;

          std::vector<at::Tensor> outs;
          for (int r = 0; r < size; ++r) outs.push_back(at::empty({n}, dtype));
          pg->allgather(outs, ((idx + rank) % 5).to(dtype))->wait();
          for (int r = 0; r < size; ++r) {
            ASSERT_TRUE(at::equal(outs[r].to(at::kLong), (idx + r) % 5)) << "allgather " << what;
          }

          std::vector<at::Tensor> ins;
          for (int r = 0; r < size; ++r) ins.push_back(((idx + r + rank) % 4).to(dtype));
          at::Tensor out = at::empty({n}, dtype);
          pg->reduce_scatter(out, ins, ReduceOp::MAX)->wait();
          at::Tensor best = at::zeros({n}, at::kLong);
          for (int q = 0; q < size; ++q) best = at::maximum(best, (idx + rank + q) % 4);
          ASSERT_TRUE(at::equal(out.to(at::kLong), best)) << "reduce_scatter " << what;
        }
      }
    });
  }
}

TEST(Shm, ManyOperationsInFlightThroughASmallRing) {
  spawn(3, [](int rank, StorePtr store) {
    auto pg = shm_group(store, rank, 3);
    std::vector<at::Tensor> tensors;
    std::vector<WorkPtr> works;
    for (int i = 0; i < 200; ++i) {
      tensors.push_back(
          at::full({1 + (i * 997) % 5000}, static_cast<double>(rank + i), at::kDouble));
      works.push_back(pg->allreduce(tensors.back()));
      if (i % 50 == 0) works.push_back(pg->barrier());
    }
    for (auto& w : works) w->wait();
    for (int i = 0; i < 200; ++i) {
      ASSERT_TRUE(at::all(tensors[i] == 3.0 * i + 3).item<bool>()) << "allreduce " << i;
    }
  });
}

// Small operations issued while the group is idle run on the caller's
// thread (ShmOptions::inline_bytes) when the peers are inside them: the last
// rank to issue one gets it back complete. Those issued behind queued work
// go to the progress thread. Either way every result is right and the Works
// complete in issue order.
TEST(Shm, CallerRunOperationsKeepIssueOrderWithQueuedOnes) {
  for (int size : {2, 3}) {
    std::atomic<int> issued{0};
    spawn(size, [&](int rank, StorePtr store) {
      auto pg = shm_group(store, rank, size, tiny().spin_iterations(20000));
      const double sum_of_ranks = size * (size - 1) / 2.0;
      // Each round one rank issues last, once the others are inside the
      // operation: it runs it itself, and it is complete when issued.
      for (int i = 0; i < 12; ++i) {
        const int last = i % size;
        at::Tensor t = at::full({16}, static_cast<double>(rank + i), at::kDouble);
        WorkPtr w;
        if (rank == last) {
          while (issued.load() < (i + 1) * (size - 1)) std::this_thread::yield();
          w = pg->allreduce(t);
          EXPECT_TRUE(w->is_completed()) << "round " << i << ": rank " << rank << " issued last";
        } else {
          w = pg->allreduce(t);
          ++issued;
        }
        w->wait();
        ASSERT_TRUE(at::all(t == sum_of_ranks + size * i).item<bool>()) << "allreduce " << i;
      }
      // Interleaved with large ones that the progress thread runs.
      std::mutex mutex;
      std::vector<int> completed;
      std::vector<std::pair<at::Tensor, double>> expect;
      std::vector<WorkPtr> works;
      for (int i = 0; i < 60; ++i) {
        const bool large = i % 3 == 0;
        at::Tensor t = at::full({large ? 20000 : 8}, static_cast<double>(rank * i), at::kDouble);
        works.push_back(i % 5 == 4 ? pg->broadcast(t, i % size) : pg->allreduce(t));
        expect.emplace_back(t, i % 5 == 4 ? (i % size) * i : sum_of_ranks * i);
        works.back()->on_complete([&, i] {
          std::lock_guard<std::mutex> lock(mutex);
          completed.push_back(i);
        });
        if (i % 7 == 6) works.back()->wait();  // idle again now and then
      }
      for (auto& w : works) w->wait();
      std::lock_guard<std::mutex> lock(mutex);
      for (size_t i = 0; i < completed.size(); ++i) {
        ASSERT_EQ(completed[i], static_cast<int>(i)) << "completion order";
      }
      for (size_t i = 0; i < expect.size(); ++i) {
        ASSERT_TRUE(at::all(expect[i].first == expect[i].second).item<bool>()) << "op " << i;
      }
    });
  }
}

TEST(Shm, SameBitsOnEveryRank) {
  const int size = 4;
  std::vector<at::Tensor> results(size);
  spawn(size, [&](int rank, StorePtr store) {
    auto pg = shm_group(store, rank, size, ShmOptions().timeout(std::chrono::seconds(60)));
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1234 + rank);
    for (int64_t n : {1000, 3000000}) {
      at::Tensor t = at::randn({n}, gen, at::kFloat) * 1e3;
      pg->allreduce(t, ReduceOp::SUM)->wait();
      if (n > 1000) results[rank] = t;
    }
  });
  for (int r = 1; r < size; ++r) EXPECT_TRUE(at::equal(results[0], results[r])) << "rank " << r;
}

TEST(Shm, SegmentNameIsGoneOnceTheGroupIsUp) {
  spawn(4, [](int rank, StorePtr store) {
    auto pg = shm_group(store, rank, 4);
    pg->barrier()->wait();
    EXPECT_EQ(own_segments(), 0);
  });
}

TEST(Shm, PeerThatClosesItsGroupIsNamed) {
  spawn(3, [](int rank, StorePtr store) {
    auto pg = shm_group(store, rank, 3);
    pg->allreduce(at::ones({100}))->wait();
    if (rank == 2) return;  // destroys its group without the second collective
    const auto start = std::chrono::steady_clock::now();
    std::exception_ptr error;
    try {
      pg->allreduce(at::ones({100000}))->wait();
    } catch (...) {
      error = std::current_exception();
    }
    const auto rethrow = [&] {
      if (error) std::rethrow_exception(error);
    };
    // Not a timeout: the peer's leaving is seen at once.
    const Raised timeout = raised<TimeoutError>(rethrow);
    EXPECT_FALSE(timeout) << timeout;
    // About rank 2, whether this rank saw it leave or the other rank did.
    const Raised r = raised<CommunicationError>(rethrow);
    ASSERT_TRUE(r) << "allreduce without rank 2: " << r;
    const auto& peers = r.context.peers;
    EXPECT_NE(std::find(peers.begin(), peers.end(), 2), peers.end()) << r;
    for (int peer : peers) EXPECT_TRUE(peer == 2 || peer == 1 - rank) << peer << ": " << r;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  });
}

TEST(Shm, StalledPeerTimesOutNamingIt) {
  spawn(2, [](int rank, StorePtr store) {
    auto pg = shm_group(store, rank, 2, tiny().timeout(milliseconds(1000)));
    if (rank == 1) {
      std::this_thread::sleep_for(milliseconds(2500));
      // About rank 0, which broke the group (and found this rank stalled).
      const Raised r = raised<CommunicationError>([&] { pg->allreduce(at::ones({10}))->wait(); });
      ASSERT_TRUE(r) << "rank 1 ran on a broken group: " << r;
      EXPECT_EQ(r.context.peers, std::vector<int>{0}) << r;
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    // A longer wait than the group's timeout: the group's own error, not
    // Work::wait's, is under test. About rank 1, naming its process.
    const Raised r =
        raised<TimeoutError>([&] { pg->allreduce(at::ones({10}))->wait(milliseconds(10000)); });
    EXPECT_TRUE(r) << "allreduce without rank 1: " << r;
    EXPECT_EQ(r.context.peers, std::vector<int>{1}) << r;
    EXPECT_TRUE(r.mentions("pid " + std::to_string(getpid()))) << r;
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_GE(took, milliseconds(850));  // the deadline is a tenth short
    EXPECT_LT(took, milliseconds(2400));
  });
}

TEST(Shm, ThroughTheRegistryWithItsOptions) {
  spawn(2, [](int rank, StorePtr store) {
    auto o = std::make_shared<ShmOptions>(tiny());
    auto pg = new_process_group(store, rank, 2, InitOptions().backend("shm").backend_options(o));
    EXPECT_EQ(pg->backend_name(), "shm");
    auto shm = std::dynamic_pointer_cast<ShmProcessGroup>(pg);
    ASSERT_TRUE(shm);
    EXPECT_EQ(shm->options().chunk_bytes(), 4096);
    at::Tensor t = at::ones({3000});
    pg->allreduce(t)->wait();
    EXPECT_TRUE(at::all(t == 2).item<bool>());
    EXPECT_NE(pg->unsupported_reason(at::ones({2}, at::kShort)), "");
  });
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto gloo = std::make_shared<GlooOptions>();
  EXPECT_THROW(new_process_group(store, 0, 1, InitOptions().backend("shm").backend_options(gloo)),
               InvalidArgument);
}

TEST(Shm, RanksWithDifferentOptionsFailAtOnceOnEveryRank) {
  const auto start = std::chrono::steady_clock::now();
  spawn(3, [](int rank, StorePtr store) {
    ShmOptions o = tiny();
    if (rank == 2) o.slots(4);  // a segment of another size
    // Rank 2 finds its segment of another size; the others fail citing it.
    const auto build = [&] { shm_group(store, rank, 3, o); };
    const Raised r = rank == 2 ? raised<InvalidArgument>(build) : raised<CommunicationError>(build);
    ASSERT_TRUE(r) << "rank " << rank << ": " << r;
    if (rank != 2) {
      EXPECT_EQ(r.context.rank, rank) << r;
      EXPECT_EQ(r.context.world_size, 3) << r;
      EXPECT_EQ(r.context.peers, std::vector<int>{2}) << r;
    }
    // What the ranks must give alike.
    EXPECT_TRUE(r.mentions("ShmOptions")) << r;
    EXPECT_TRUE(r.mentions("slots")) << r;
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(own_segments(), 0);
}

// Collectives that disagree across ranks are an error on every rank, with
// DDP_DEBUG off: each rank's descriptor, compared at the operation's first
// step, before anything is mixed. Never a result, never the timeout.
struct MismatchCase {
  const char* name;
  std::function<std::vector<WorkPtr>(int rank, ProcessGroup& pg)> issue;
};

std::vector<MismatchCase> mismatch_cases() {
  const auto f = [](int64_t n) { return at::ones({n}, at::kFloat); };
  return {
      {"allreduce SUM vs MAX",
       [f](int rank, ProcessGroup& pg) {
         return std::vector<WorkPtr>{pg.allreduce(f(100), rank ? ReduceOp::MAX : ReduceOp::SUM)};
       }},
      {"allreduce float32 vs float64",
       [](int rank, ProcessGroup& pg) {
         return std::vector<WorkPtr>{
             pg.allreduce(at::ones({100}, rank ? at::kDouble : at::kFloat))};
       }},
      {"allreduce of 100 vs 101 elements (one step)",
       [f](int rank, ProcessGroup& pg) {
         return std::vector<WorkPtr>{pg.allreduce(f(100 + rank))};
       }},
      {"allreduce of 20000 vs 20001 elements (pipelined)",
       [f](int rank, ProcessGroup& pg) {
         return std::vector<WorkPtr>{pg.allreduce(f(20000 + rank))};
       }},
      {"allreduce of 200 vs 300 elements (one step vs pipelined)",
       [f](int rank, ProcessGroup& pg) {
         return std::vector<WorkPtr>{pg.allreduce(f(rank ? 300 : 200))};
       }},
      {"allreduce vs broadcast",
       [f](int rank, ProcessGroup& pg) {
         return std::vector<WorkPtr>{rank ? pg.broadcast(f(100), 0) : pg.allreduce(f(100))};
       }},
      {"broadcast from root 0 vs root 1",
       [f](int rank, ProcessGroup& pg) {
         return std::vector<WorkPtr>{pg.broadcast(f(100), rank)};
       }},
      {"allgather of 10 vs 11 elements",
       [f](int rank, ProcessGroup& pg) {
         std::vector<at::Tensor> out{f(10 + rank), f(10 + rank)};
         return std::vector<WorkPtr>{pg.allgather(out, f(10 + rank))};
       }},
      {"reduce_scatter SUM vs MIN",
       [f](int rank, ProcessGroup& pg) {
         std::vector<at::Tensor> in{f(64), f(64)};
         return std::vector<WorkPtr>{
             pg.reduce_scatter(f(64), in, rank ? ReduceOp::MIN : ReduceOp::SUM)};
       }},
      {"barrier vs allreduce",
       [f](int rank, ProcessGroup& pg) {
         return std::vector<WorkPtr>{rank ? pg.barrier() : pg.allreduce(f(8))};
       }},
      {"allreduce_coalesced of [3, 5] vs [5, 3] elements",
       [f](int rank, ProcessGroup& pg) {
         return std::vector<WorkPtr>{pg.allreduce_coalesced({f(rank ? 5 : 3), f(rank ? 3 : 5)})};
       }},
      {"allreduce of 8 vs allreduce_coalesced of [4, 4]",
       [f](int rank, ProcessGroup& pg) {
         return std::vector<WorkPtr>{rank ? pg.allreduce_coalesced({f(4), f(4)})
                                          : pg.allreduce(f(8))};
       }},
      {"allreduce of 0 vs 10 elements, then a barrier",
       [f](int rank, ProcessGroup& pg) {
         return std::vector<WorkPtr>{pg.allreduce(f(rank ? 10 : 0)), pg.barrier()};
       }},
  };
}

TEST(Shm, CollectivesThatDisagreeFailOnEveryRank) {
  for (const MismatchCase& c : mismatch_cases()) {
    SCOPED_TRACE(c.name);
    spawn(2, [&](int rank, StorePtr store) {
      auto pg = shm_group(store, rank, 2);
      pg->allreduce(at::ones({4}))->wait();  // a good one first: the check is not at setup
      std::vector<WorkPtr> works = c.issue(rank, *pg);
      try {
        for (auto& w : works) w->wait();
        ADD_FAILURE() << "rank " << rank << ": no error";
      } catch (const TimeoutError& e) {
        ADD_FAILURE() << "rank " << rank << ": waited for the timeout: " << e.what();
      } catch (const CollectiveMismatch&) {  // this rank found it
      } catch (const CommunicationError&) {  // its peer did, and broke the group
      }
      EXPECT_THROW(pg->barrier()->wait(), CommunicationError) << "rank " << rank;
    });
  }
}

TEST(Shm, BadOptionsAreRejected) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  EXPECT_THROW(shm_group(store, 0, 1, ShmOptions().chunk_bytes(1000)), InvalidArgument);
  EXPECT_THROW(shm_group(store, 0, 1, ShmOptions().slots(1)), InvalidArgument);
  EXPECT_THROW(shm_group(store, 0, 1, ShmOptions().small_bytes(1 << 30)), InvalidArgument);
  EXPECT_THROW(shm_group(store, 0, 1, ShmOptions().inline_bytes(-1)), InvalidArgument);
}

}  // namespace
}  // namespace ddp::testing
