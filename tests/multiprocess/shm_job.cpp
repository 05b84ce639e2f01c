// One rank of a job on the shm backend, for the process tests
// (shm_test.sh): every collective checked, or one of the faults.
//
//   shm_job [--fault none|throw|kill|stop|loop] [--victim R] [--timeout-s T]
//
// none:  every collective at several sizes, checked; prints "all correct".
// throw: the victim throws after the first collective (its group is
//        destroyed as the exception unwinds; the program exits 1).
// kill:  the victim sends itself SIGKILL inside a 16 MiB allreduce.
// stop:  the victim sends itself SIGSTOP inside a 16 MiB allreduce.
// loop:  allreduces until stopped from outside (ddprun gets SIGTERM).
// Survivors of a fault print "survivor rank R failed after MS ms of waiting:
// <error>" (MS: from the start of the wait that failed), then its facts
// (support/error_facts.h), and exit 3 (0 would mean the fault went
// unnoticed). Any other error: "rank R: <error>", its facts if it is a
// ddp::Error (R is -1 before the group exists), exit 1.
// The backend is DDP_BACKEND's (shm_test.sh sets shm).
#include <ddp/ddp.h>

#include "../support/error_facts.h"

#include <torch/torch.h>

#include <csignal>
#include <iostream>
#include <thread>

namespace {

void check(bool ok, const std::string& what, int rank) {
  if (!ok) throw std::runtime_error("rank " + std::to_string(rank) + ": wrong result: " + what);
}

void every_collective(ddp::ProcessGroup& pg) {
  const int rank = pg.rank(), n = pg.size();
  for (int64_t elements : {1, 1000, 100000, 3000000}) {
    at::Tensor sum = torch::full({elements}, rank + 1.0f);
    at::Tensor avg = torch::full({elements}, rank * 2.0, at::kDouble);
    at::Tensor half = torch::full({elements}, 1.0, at::kHalf);
    auto w1 = pg.allreduce(sum);  // in flight together
    auto w2 = pg.allreduce(avg, ddp::ReduceOp::AVG);
    auto w3 = pg.allreduce(half, ddp::ReduceOp::SUM);
    w1->wait();
    w2->wait();
    w3->wait();
    check(torch::all(sum == n * (n + 1) / 2.0f).item<bool>(), "allreduce SUM", rank);
    check(torch::allclose(avg, torch::full({elements}, n - 1.0, at::kDouble)), "allreduce AVG",
          rank);
    check(torch::all(half == static_cast<double>(n)).item<bool>(), "allreduce float16", rank);

    at::Tensor b = torch::full({elements}, rank, at::kLong);
    pg.broadcast(b, n - 1)->wait();
    check(torch::all(b == n - 1).item<bool>(), "broadcast", rank);

    std::vector<at::Tensor> gathered;
    for (int r = 0; r < n; ++r) gathered.push_back(torch::empty({elements}, at::kInt));
    pg.allgather(gathered, torch::full({elements}, rank, at::kInt))->wait();
    for (int r = 0; r < n; ++r) check(torch::all(gathered[r] == r).item<bool>(), "allgather", rank);

    std::vector<at::Tensor> chunks;
    for (int r = 0; r < n; ++r) chunks.push_back(torch::full({elements}, r * 10.0f + rank));
    at::Tensor mine = torch::empty({elements});
    pg.reduce_scatter(mine, chunks)->wait();
    check(torch::all(mine == rank * 10.0f * n + n * (n - 1) / 2.0f).item<bool>(), "reduce_scatter",
          rank);
  }
  pg.barrier()->wait();
}

}  // namespace

int main(int argc, char** argv) {
  std::string fault = "none";
  int victim = 1, timeout_s = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--fault")
      fault = value;
    else if (flag == "--victim")
      victim = std::stoi(value);
    else if (flag == "--timeout-s")
      timeout_s = std::stoi(value);
  }
  int rank = -1;
  auto waiting_since = std::chrono::steady_clock::now();
  try {
    auto pg = ddp::init_process_group(ddp::InitOptions().timeout(std::chrono::seconds(timeout_s)));
    rank = pg->rank();
    if (fault == "none") {
      every_collective(*pg);
      std::cout << "rank " << rank << " of " << pg->size() << " [" << pg->backend_name()
                << "]: every collective correct" << std::endl;
      return 0;
    }
    waiting_since = std::chrono::steady_clock::now();
    pg->allreduce(torch::ones({1000}))->wait();
    if (fault == "throw" && rank == victim) throw std::runtime_error("the victim's own error");
    for (int i = 0; i < (fault == "loop" ? 1000000 : 100); ++i) {
      auto work = pg->allreduce(torch::ones({4 << 20}));
      if (rank == victim && i == 3 && fault == "kill") raise(SIGKILL);
      if (rank == victim && i == 3 && fault == "stop") raise(SIGSTOP);
      waiting_since = std::chrono::steady_clock::now();
      work->wait();
    }
    return 0;
  } catch (const ddp::CommunicationError& e) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - waiting_since)
                  .count();
    std::cerr << "survivor rank " << rank << " failed after " << ms
              << " ms of waiting: " << e.what() << std::endl;
    ddp::testing::print_error_facts(std::cerr, e);
    // Rank 0 hosts the store: stay a moment, so the others' rendezvous
    // store stays reachable while they report.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << ": " << e.what() << std::endl;
    ddp::testing::print_error_facts(std::cerr, e);
    return 1;
  }
}
