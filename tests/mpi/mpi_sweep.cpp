// The MPI backend, one process per rank:
//   mpirun -np N mpi_sweep              every collective over every dtype, op
//                                       and element count (common/expectations.h),
//                                       and groups of some of the ranks
//   mpirun -np 2 mpi_sweep --mismatch   ranks issue different collectives under
//                                       the DDP_DEBUG=detail wrapper
//   mpirun -np 2 mpi_sweep --timeout    rank 1 never joins: rank 0 times out
//   mpirun -np 2 mpi_sweep --kill       rank 1 dies in a collective
// Prints "ok - ..." / "not ok - ..." lines; exits 1 if any check failed.
#include "common/expectations.h"
#include "support/tap.h"

#include "collectives/checked_process_group.h"

#include <ddp/backends/mpi.h>
#include <ddp/errors.h>

#include <ATen/ATen.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace ddp::testing {
namespace {

// Collects the first mismatch of a section; one TAP line per section.
class Section {
 public:
  explicit Section(std::string name) : name_(std::move(name)) {}
  void check(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
    ++checks_;
    std::string diff = mismatch(got, want);
    if (!diff.empty() && first_.empty()) first_ = what + ": " + diff;
  }
  void report(Tap& tap) const {
    tap.check(first_.empty(), name_ + " (" + std::to_string(checks_) + " checks)", first_);
  }

 private:
  std::string name_;
  std::string first_;
  int checks_ = 0;
};

void allreduce_sweep(Tap& tap, ProcessGroup& pg) {
  const int size = pg.size(), rank = pg.rank();
  Section s("allreduce: every op, dtype and count, world " + std::to_string(size));
  for (int64_t n : kCounts) {
    for (auto dtype : kDtypes) {
      for (auto op : kOps) {
        if (op == ReduceOp::AVG && !at::isFloatingType(dtype)) continue;
        at::Tensor t = input(dtype, rank, n);
        pg.allreduce(t, op)->wait();
        s.check(t, expected(op, dtype, size, n), label(to_string(op), size, rank, dtype, n));
      }
    }
  }
  s.report(tap);
}

void other_collectives(Tap& tap, ProcessGroup& pg) {
  const int size = pg.size(), rank = pg.rank();
  const std::string world = ", world " + std::to_string(size);
  Section coalesced("allreduce_coalesced" + world), broadcast("broadcast" + world),
      allgather("allgather" + world), reduce_scatter("reduce_scatter" + world);
  for (int64_t n : kCounts) {
    for (auto dtype : kDtypes) {
      const auto what = [&](const char* op) { return label(op, size, rank, dtype, n); };
      std::vector<at::Tensor> parts = {input(dtype, rank, n), input(dtype, rank, 3, n),
                                       input(dtype, rank, n / 2, n + 3).view({-1, 1})};
      pg.allreduce_coalesced(parts, ReduceOp::SUM)->wait();
      coalesced.check(parts[0], expected(ReduceOp::SUM, dtype, size, n), what("coalesced[0]"));
      coalesced.check(parts[1], expected(ReduceOp::SUM, dtype, size, 3, n), what("coalesced[1]"));
      coalesced.check(parts[2], expected(ReduceOp::SUM, dtype, size, n / 2, n + 3),
                      what("coalesced[2]"));
      const int root = size - 1;
      at::Tensor b = input(dtype, rank, n);
      pg.broadcast(b, root)->wait();
      broadcast.check(b, input(dtype, root, n), what("broadcast"));
      std::vector<at::Tensor> gathered;
      for (int r = 0; r < size; ++r) gathered.push_back(at::full({n}, 7, dtype));
      pg.allgather(gathered, input(dtype, rank, n))->wait();
      for (int r = 0; r < size; ++r)
        allgather.check(gathered[r], input(dtype, r, n), what("allgather"));
      // Rank q's chunk r is input(q, n, salt r*n); rank r gets their sum.
      std::vector<at::Tensor> chunks;
      for (int r = 0; r < size; ++r) chunks.push_back(input(dtype, rank, n, r * n));
      at::Tensor out = at::full({n}, 7, dtype);
      pg.reduce_scatter(out, chunks, ReduceOp::SUM)->wait();
      reduce_scatter.check(out, expected(ReduceOp::SUM, dtype, size, n, rank * n),
                           what("reduce_scatter"));
    }
  }
  for (auto op : kOps) {
    const int64_t n = 1001;
    std::vector<at::Tensor> chunks;
    for (int r = 0; r < size; ++r) chunks.push_back(input(at::kBFloat16, rank, n, r * n));
    at::Tensor out = at::empty({n}, at::kBFloat16);
    pg.reduce_scatter(out, chunks, op)->wait();
    reduce_scatter.check(out, expected(op, at::kBFloat16, size, n, rank * n),
                         label(to_string(op), size, rank, at::kBFloat16, n));
  }
  coalesced.report(tap);
  broadcast.report(tap);
  allgather.report(tap);
  reduce_scatter.report(tap);
}

// Many collectives in flight at once complete, in issue order.
void in_flight(Tap& tap, ProcessGroup& pg) {
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
  Section s("16 allreduces and a barrier in flight");
  for (int i = 0; i < 16; ++i) {
    s.check(ts[i], expected(ReduceOp::SUM, at::kFloat, pg.size(), 1000 * (i + 1)), "allreduce");
  }
  s.report(tap);
  tap.check(ordered, "the barrier completed after every allreduce issued before it");
}

// Small collectives issued while the group is idle start on the caller's
// thread (MpiOptions::inline_bytes), the rest on the worker: interleaved,
// every result is right and the Works complete in issue order. A rank that
// issues last, its peers already polling, gets its small allreduce back
// complete (at world 2; with more ranks than cores a peer may be descheduled).
void caller_run_interleaved(Tap& tap, ProcessGroup& pg) {
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
  Section s("small collectives on the caller interleaved with large ones on the worker");
  for (auto& [got, want] : results) s.check(got, want, "result");
  s.report(tap);
  bool ordered = true;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (size_t i = 0; i < completed.size(); ++i) ordered = ordered && completed[i] == int(i);
  }
  tap.check(ordered && completed.size() == works.size(), "they completed in issue order");
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
    tap.check(complete_at_issue > 0, "issued last, a small allreduce ran on the caller (" +
                                         std::to_string(complete_at_issue) + " of 10)");
  }
}

// Groups of some of MPI's ranks (world_ranks): the world in reverse order,
// and the even ranks alone, built and used by them only, while the odd ranks
// do other work; then world_ranks that name no group of this process.
void sub_groups(Tap& tap, int world_rank, int world_size) {
  std::vector<int> reversed;
  for (int r = world_size - 1; r >= 0; --r) reversed.push_back(r);
  MpiProcessGroup backwards(std::chrono::seconds(60), {}, 1, reversed);
  at::Tensor t = input(at::kDouble, backwards.rank(), 1000);
  backwards.allreduce(t)->wait();
  tap.check(backwards.rank() == world_size - 1 - world_rank && backwards.size() == world_size &&
                mismatch(t, expected(ReduceOp::SUM, at::kDouble, world_size, 1000)).empty(),
            "a group of the world in reverse order numbers its ranks so and reduces right");

  std::vector<int> evens;
  for (int r = 0; r < world_size; r += 2) evens.push_back(r);
  if (world_rank % 2 == 0) {
    MpiProcessGroup even(std::chrono::seconds(60), {}, 2, evens);
    at::Tensor e = input(at::kFloat, even.rank(), 777);
    even.allreduce(e)->wait();
    const int n = static_cast<int>(evens.size());
    tap.check(even.rank() == world_rank / 2 && even.size() == n &&
                  mismatch(e, expected(ReduceOp::SUM, at::kFloat, n, 777)).empty(),
              "the even ranks' group is built and used by them alone");
  }
  backwards.barrier()->wait();

  auto refusal = [](std::vector<int> ranks) {
    try {
      MpiProcessGroup bad(std::chrono::seconds(5), {}, 3, std::move(ranks));
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(built)");
  };
  const std::string twice = refusal({world_rank, world_rank});
  const std::string outside = refusal({world_rank, world_size});
  std::vector<int> others;
  for (int r = 0; r < world_size; ++r) if (r != world_rank) others.push_back(r);
  const std::string absent = others.empty() ? "" : refusal(others);  // world 1: no such group
  tap.check(twice.find("listed twice") != std::string::npos &&
                outside.find("outside MPI_COMM_WORLD's") != std::string::npos &&
                (others.empty() ||
                 absent.find("is not among the group's world_ranks") != std::string::npos),
            "world_ranks with a rank twice, outside the world, or without this process are "
            "refused before MPI is asked",
            twice + " / " + outside + " / " + absent);
}

// DDP_DEBUG=detail over MPI: different element counts are caught on every rank.
void mismatch_case(Tap& tap, const ProcessGroupPtr& mpi) {
  detail::CheckedProcessGroup pg(mpi);
  at::Tensor t = at::zeros({4 + pg.rank()}, at::kFloat);
  try {
    pg.allreduce(t)->wait();
    tap.fail("mismatched allreduce was not detected");
  } catch (const CollectiveMismatch& e) {
    const std::string what = e.what();
    tap.check(what.find("rank 0: allreduce #1 (SUM, Float, 4 elements)") != std::string::npos &&
                  what.find("rank 1: allreduce #1 (SUM, Float, 5 elements)") != std::string::npos,
              "CollectiveMismatch lists every rank's collective", what);
  }
}

// Rank 1 never joins: rank 0's allreduce fails at the group's timeout.
void timeout_case(Tap& tap) {
  auto pg = std::make_shared<MpiProcessGroup>(std::chrono::milliseconds(1500));
  if (pg->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    tap.pass("rank 1 stayed away");
    return;
  }
  at::Tensor t = at::ones({8}, at::kFloat);
  const auto start = std::chrono::steady_clock::now();
  try {
    pg->allreduce(t)->wait(std::chrono::seconds(30));
    tap.fail("allreduce completed without rank 1");
  } catch (const TimeoutError& e) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string what = e.what();
    tap.check(what.find("allreduce #0") != std::string::npos &&
                  what.find("rank 0 of 2 [mpi]") != std::string::npos &&
                  what.find("cannot be cancelled") != std::string::npos && s < 10,
              "TimeoutError names the op and the rank, at the group's timeout",
              what + " after " + std::to_string(s) + " s");
  }
  try {
    pg->barrier()->wait(std::chrono::seconds(30));
    tap.fail("the group still works after a timeout");
  } catch (const CommunicationError& e) {
    tap.check(std::string(e.what()).find("broken") != std::string::npos,
              "the group is broken after a timeout", e.what());
  }
}

// Rank 1 dies during a collective: mpirun must end the job naming it (the
// ctest entry checks its message), not leave rank 0 waiting.
void kill_case(Tap& tap, ProcessGroup& pg) {
  at::Tensor t = at::ones({1 << 16}, at::kFloat);
  pg.allreduce(t)->wait();
  if (pg.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::raise(SIGKILL);
  }
  try {
    pg.allreduce(t)->wait();
    tap.fail("allreduce completed although rank 1 died");
  } catch (const std::exception& e) {
    tap.pass(std::string("the survivor's allreduce failed: ") + e.what());
  }
}

int main_impl(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "--timeout") {
    Tap tap(-1);
    timeout_case(tap);
    return tap.finish();
  }
  auto pg = std::make_shared<MpiProcessGroup>(std::chrono::seconds(120));
  Tap tap(pg->rank());
  if (mode == "--mismatch") {
    mismatch_case(tap, pg);
  } else if (mode == "--kill") {
    kill_case(tap, *pg);
  } else {
    allreduce_sweep(tap, *pg);
    other_collectives(tap, *pg);
    in_flight(tap, *pg);
    caller_run_interleaved(tap, *pg);
    sub_groups(tap, pg->rank(), pg->size());
    pg->barrier()->wait();
  }
  return tap.finish();
}

}  // namespace
}  // namespace ddp::testing

int main(int argc, char** argv) {
  try {
    return ddp::testing::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::cout << "not ok - " << e.what() << std::endl;
    return 1;
  }
}
