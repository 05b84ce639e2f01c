// The MPI backend, one process per rank under mpirun, as GoogleTest
// (support/rank_gtest.h; the default group is MPI's: DDP_BACKEND=mpi):
//   mpirun -np N -x DDP_BACKEND=mpi mpi_backend_test
//       every collective over every dtype, op and element count
//       (common/expectations.h), many in flight, small ones on the caller,
//       and groups of some of the ranks (MpiBackend.*); from 2 ranks, the
//       DDP_DEBUG=detail check catching ranks that issue different
//       collectives (MpiMismatch.*)
//   ... --gtest_filter=MpiFaults.RankThatNeverJoinsTimesOut   (2 ranks)
//   ... --gtest_filter=MpiFaults.DeadPeerEndsTheJob           (2 ranks)
// MpiFaults end the job (a collective left pending, a rank killed), so they
// run only when a filter names them; their verdict is in the output
// (tests/mpi/CMakeLists.txt), not in mpirun's exit status.
#include "common/expectations.h"
#include "support/rank_gtest.h"
#include "support/raised.h"

#include "collectives/checked_process_group.h"

#include <ddp/backends/mpi.h>
#include <ddp/errors.h>

#include <ATen/ATen.h>

#include <chrono>
#include <csignal>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ddp::testing {
namespace {

ProcessGroup& world() { return *this_rank().group; }

// The first failed comparison of a sweep of thousands, so that a broken
// sweep fails its TEST with one line.
class FirstMismatch {
 public:
  void compare(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
    ++count_;
    if (!first_.empty()) return;
    const std::string diff = mismatch(got, want);
    if (!diff.empty()) first_ = what + ": " + diff;
  }
  void expect_none(const std::string& sweep) const {
    check(first_.empty(), sweep + " (" + std::to_string(count_) + " comparisons)", first_);
  }

 private:
  std::string first_;
  int count_ = 0;
};

TEST(MpiBackend, AllreduceEveryOpDtypeAndCount) {
  ProcessGroup& pg = world();
  ASSERT_EQ(pg.backend_name(), "mpi") << "run with mpirun -x DDP_BACKEND=mpi";
  const int size = pg.size(), rank = pg.rank();
  FirstMismatch s;
  for (int64_t n : kCounts) {
    for (auto dtype : kDtypes) {
      for (auto op : kOps) {
        if (op == ReduceOp::AVG && !at::isFloatingType(dtype)) continue;
        at::Tensor t = input(dtype, rank, n);
        pg.allreduce(t, op)->wait();
        s.compare(t, expected(op, dtype, size, n), label(to_string(op), size, rank, dtype, n));
      }
    }
  }
  s.expect_none("allreduce");
}

TEST(MpiBackend, CoalescedBroadcastAllgatherReduceScatter) {
  ProcessGroup& pg = world();
  const int size = pg.size(), rank = pg.rank();
  FirstMismatch coalesced, broadcast, allgather, reduce_scatter;
  for (int64_t n : kCounts) {
    for (auto dtype : kDtypes) {
      const auto what = [&](const char* op) { return label(op, size, rank, dtype, n); };
      std::vector<at::Tensor> parts = {input(dtype, rank, n), input(dtype, rank, 3, n),
                                       input(dtype, rank, n / 2, n + 3).view({-1, 1})};
      pg.allreduce_coalesced(parts, ReduceOp::SUM)->wait();
      coalesced.compare(parts[0], expected(ReduceOp::SUM, dtype, size, n), what("coalesced[0]"));
      coalesced.compare(parts[1], expected(ReduceOp::SUM, dtype, size, 3, n), what("coalesced[1]"));
      coalesced.compare(parts[2], expected(ReduceOp::SUM, dtype, size, n / 2, n + 3),
                        what("coalesced[2]"));
      const int root = size - 1;
      at::Tensor b = input(dtype, rank, n);
      pg.broadcast(b, root)->wait();
      broadcast.compare(b, input(dtype, root, n), what("broadcast"));
      std::vector<at::Tensor> gathered;
      for (int r = 0; r < size; ++r) gathered.push_back(at::full({n}, 7, dtype));
      pg.allgather(gathered, input(dtype, rank, n))->wait();
      for (int r = 0; r < size; ++r) {
        allgather.compare(gathered[r], input(dtype, r, n), what("allgather"));
      }
      // Rank q's chunk r is input(q, n, salt r*n); rank r gets their sum.
      std::vector<at::Tensor> chunks;
      for (int r = 0; r < size; ++r) chunks.push_back(input(dtype, rank, n, r * n));
      at::Tensor out = at::full({n}, 7, dtype);
      pg.reduce_scatter(out, chunks, ReduceOp::SUM)->wait();
      reduce_scatter.compare(out, expected(ReduceOp::SUM, dtype, size, n, rank * n),
                             what("reduce_scatter"));
    }
  }
  for (auto op : kOps) {
    const int64_t n = 1001;
    std::vector<at::Tensor> chunks;
    for (int r = 0; r < size; ++r) chunks.push_back(input(at::kBFloat16, rank, n, r * n));
    at::Tensor out = at::empty({n}, at::kBFloat16);
    pg.reduce_scatter(out, chunks, op)->wait();
    reduce_scatter.compare(out, expected(op, at::kBFloat16, size, n, rank * n),
                           label(to_string(op), size, rank, at::kBFloat16, n));
  }
  coalesced.expect_none("allreduce_coalesced");
  broadcast.expect_none("broadcast");
  allgather.expect_none("allgather");
  reduce_scatter.expect_none("reduce_scatter");
}

// Many collectives in flight at once complete, in issue order.
TEST(MpiBackend, ManyInFlightCompleteInIssueOrder) {
  ProcessGroup& pg = world();
  std::vector<at::Tensor> ts;
  std::vector<WorkPtr> works;
  for (int i = 0; i < 16; ++i) {
    ts.push_back(input(at::kFloat, pg.rank(), 1000 * (i + 1)));
    works.push_back(pg.allreduce(ts.back()));
  }
  works.push_back(pg.barrier());
  works.back()->wait();
  bool ordered = true;
  for (auto& w : works) ordered = ordered && w->is_completed();
  check(ordered, "the barrier completed after every allreduce issued before it");
  FirstMismatch s;
  for (int i = 0; i < 16; ++i) {
    s.compare(ts[i], expected(ReduceOp::SUM, at::kFloat, pg.size(), 1000 * (i + 1)),
              "allreduce " + std::to_string(i));
  }
  s.expect_none("16 allreduces and a barrier in flight");
}

// Small collectives issued while the group is idle start on the caller's
// thread (MpiOptions::inline_bytes), the rest on the worker: interleaved,
// every result is right and the Works complete in issue order. A rank that
// issues last, its peers already polling, gets its small allreduce back
// complete (at world 2; with more ranks than cores a peer may be descheduled).
TEST(MpiBackend, SmallOnTheCallerInterleavedWithLargeOnTheWorker) {
  ProcessGroup& pg = world();
  const int rank = pg.rank(), size = pg.size();
  std::mutex mutex;
  std::vector<int> completed;
  std::vector<std::pair<at::Tensor, at::Tensor>> results;
  std::vector<WorkPtr> works;
  for (int i = 0; i < 40; ++i) {
    const int64_t n = i % 3 == 0 ? 100000 : 16;  // 400 KB: past inline_bytes
    at::Tensor t = input(at::kFloat, rank, n);
    if (i % 5 == 4) {
      works.push_back(pg.broadcast(t, i % size));
      results.emplace_back(t, input(at::kFloat, i % size, n));
    } else {
      works.push_back(pg.allreduce(t));
      results.emplace_back(t, expected(ReduceOp::SUM, at::kFloat, size, n));
    }
    works.back()->on_complete([&, i] {
      std::lock_guard<std::mutex> lock(mutex);
      completed.push_back(i);
    });
    if (i % 7 == 6) works.back()->wait();  // idle again now and then
  }
  for (auto& w : works) w->wait();
  FirstMismatch s;
  for (auto& [got, want] : results) s.compare(got, want, "result");
  s.expect_none("small collectives on the caller, large ones on the worker");
  {
    std::lock_guard<std::mutex> lock(mutex);
    bool ordered = completed.size() == works.size();
    for (size_t i = 0; i < completed.size(); ++i) ordered = ordered && completed[i] == int(i);
    check(ordered, "they completed in issue order");
  }
  if (size != 2) return;
  int complete_at_issue = 0;
  for (int round = 0; round < 10; ++round) {
    pg.barrier()->wait();
    at::Tensor t = input(at::kFloat, rank, 4);
    if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    WorkPtr w = pg.allreduce(t);
    complete_at_issue += rank == 0 && w->is_completed();
    w->wait();
  }
  if (rank == 0) {
    check(complete_at_issue > 0, "issued last, a small allreduce ran on the caller",
          std::to_string(complete_at_issue) + " of 10");
  }
}

// Groups of some of MPI's ranks (world_ranks): the world in reverse order,
// and the even ranks alone, built and used by them only, while the odd ranks
// do other work.
TEST(MpiBackend, GroupsOfSomeOfTheRanks) {
  const int world_rank = world().rank(), world_size = world().size();
  std::vector<int> reversed;
  for (int r = world_size - 1; r >= 0; --r) reversed.push_back(r);
  MpiProcessGroup backwards(std::chrono::seconds(60), {}, 1, reversed);
  at::Tensor t = input(at::kDouble, backwards.rank(), 1000);
  backwards.allreduce(t)->wait();
  check(backwards.rank() == world_size - 1 - world_rank && backwards.size() == world_size,
        "a group of the world in reverse order numbers its ranks so");
  check(mismatch(t, expected(ReduceOp::SUM, at::kDouble, world_size, 1000)).empty(),
        "a group of the world in reverse order reduces right");

  std::vector<int> evens;
  for (int r = 0; r < world_size; r += 2) evens.push_back(r);
  if (world_rank % 2 == 0) {
    MpiProcessGroup even(std::chrono::seconds(60), {}, 2, evens);
    at::Tensor e = input(at::kFloat, even.rank(), 777);
    even.allreduce(e)->wait();
    const int n = static_cast<int>(evens.size());
    check(even.rank() == world_rank / 2 && even.size() == n &&
              mismatch(e, expected(ReduceOp::SUM, at::kFloat, n, 777)).empty(),
          "the even ranks' group is built and used by them alone");
  }
  backwards.barrier()->wait();
}

// world_ranks with a rank twice, outside the world, or without this process
// are refused before MPI is asked (no collective: each rank alone).
TEST(MpiBackend, BadWorldRanksAreRefused) {
  const int world_rank = world().rank(), world_size = world().size();
  const auto build = [](std::vector<int> ranks) {
    return raised<InvalidArgument>(
        [&] { MpiProcessGroup bad(std::chrono::seconds(5), {}, 3, std::move(ranks)); });
  };
  const std::string me = std::to_string(world_rank);
  Raised twice = build({world_rank, world_rank});
  check(twice && twice.context.operation == "MpiProcessGroup" &&
            twice.mentions("world_ranks[1] = " + me),
        "a rank listed twice is refused, naming the entry", twice.text());
  Raised outside = build({world_rank, world_size});
  check(outside && outside.mentions("world_ranks[1] = " + std::to_string(world_size)),
        "a rank outside the world is refused, naming the entry", outside.text());
  if (world_size == 1) return;  // no group leaves this process out
  std::vector<int> others;
  for (int r = 0; r < world_size; ++r) {
    if (r != world_rank) others.push_back(r);
  }
  Raised absent = build(others);
  check(absent && absent.mentions("MPI rank " + me),
        "a group without this process is refused, naming its MPI rank", absent.text());
}

// DDP_DEBUG=detail over MPI: rank 1 all-reduces one element more than the
// others, which every rank learns, with each rank's collective.
TEST(MpiMismatch, DifferentCountsAreCaughtOnEveryRank) {
  if (world().size() < 2) GTEST_SKIP() << "needs 2 ranks or more";
  detail::CheckedProcessGroup pg(this_rank().group);
  at::Tensor t = at::zeros({pg.rank() == 1 ? 5 : 4}, at::kFloat);
  Raised r = raised<CollectiveMismatch>([&] { pg.allreduce(t)->wait(); });
  check(r && r.on(pg) && r.context.peers == std::vector<int>{1},
        "a CollectiveMismatch about rank 1 (rank 0's collective is the common one)", r.text());
  check(r.mentions("4 elements") && r.mentions("5 elements"), "it shows every rank's collective",
        r.text());
}

// Only when a --gtest_filter names them first: each ends the job.
void skip_unless_named() {
  if (GTEST_FLAG_GET(filter).rfind("MpiFaults.", 0) != 0) {
    GTEST_SKIP() << "ends the job: run alone, with --gtest_filter=MpiFaults.<name>";
  }
}

// Rank 1 never joins: rank 0's allreduce fails at the group's timeout, and
// the group is broken after it. Rank 0 then exits without MPI_Finalize (the
// collective is still pending in MPI); rank 1 reports itself skipped, so the
// one "[       OK ]" line is rank 0's.
TEST(MpiFaults, RankThatNeverJoinsTimesOut) {
  skip_unless_named();
  if (IsSkipped()) return;
  ASSERT_EQ(world().size(), 2) << "run with mpirun -np 2";
  MpiProcessGroup pg(std::chrono::milliseconds(1500), {}, 4);
  if (pg.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    GTEST_SKIP() << "rank 1 stayed away";
  }
  at::Tensor t = at::ones({8}, at::kFloat);
  const auto seconds_since = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto start = std::chrono::steady_clock::now();
  Raised r = raised<TimeoutError>([&] { pg.allreduce(t)->wait(std::chrono::seconds(30)); });
  const double waited = seconds_since(start);
  check(r && r.on(pg) && r.context.operation.rfind("allreduce #0", 0) == 0,
        "a TimeoutError of rank 0's allreduce #0", r.text());
  check(waited >= 1.0 && waited < 10, "at the group's timeout (1.5 s)",
        std::to_string(waited) + " s");
  // Refused at once, citing the collective that broke the group (a barrier
  // that merely timed out would be a CommunicationError too, but later).
  start = std::chrono::steady_clock::now();
  Raised broken = raised<CommunicationError>([&] { pg.barrier()->wait(std::chrono::seconds(30)); });
  const double refused_after = seconds_since(start);
  check(broken && broken.on(pg) && broken.mentions("allreduce #0") && refused_after < 1.0,
        "the group is broken after a timeout: the next collective is refused at once",
        broken.text() + " after " + std::to_string(refused_after) + " s");
}

// Rank 1 dies during a collective: mpirun must end the job naming it (the
// CTest entry checks mpirun's message), not leave rank 0 waiting.
TEST(MpiFaults, DeadPeerEndsTheJob) {
  skip_unless_named();
  if (IsSkipped()) return;
  ASSERT_EQ(world().size(), 2) << "run with mpirun -np 2";
  ProcessGroup& pg = world();
  at::Tensor t = at::ones({1 << 16}, at::kFloat);
  pg.allreduce(t)->wait();
  if (pg.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::raise(SIGKILL);
  }
  try {
    pg.allreduce(t)->wait();
    check(false, "the survivor's allreduce completed although rank 1 died");
  } catch (const std::exception&) {  // or mpirun ends this rank first
  }
}

}  // namespace
}  // namespace ddp::testing
