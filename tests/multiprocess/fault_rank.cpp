// A rank that fails mid-collective: every rank loops allreduces (of 16 MB by
// default); the victim, at its K-th one (from 0), by --fault
//   kill:  issues it, then kills itself with SIGKILL while the others are inside it;
//   stop:  issues it, then stops itself with SIGSTOP (frozen, its connections still open);
//   exit:  completes it and returns 0 from main (its group closes normally);
//   skip:  skips it and goes on; after the loop it hangs outside any collective;
//   shape: issues it on one element more than the others;
//   op:    issues a broadcast of the same tensor instead;
//   dtype: issues it on int32s (the same byte count);
//   wide:  issues it on doubles (twice the bytes);
//   reduce: issues it with MAX instead of SUM;
//   root:  every rank broadcasts at the K-th, the victim from root 1, the
//          others from root 0.
// Survivors must fail within the timeout (an error naming the victim where
// the backend can tell): they print it, then its facts (support/error_facts.h),
// and exit 3 (0 would mean the fault went unnoticed). A process that cannot
// join the group (a bad environment, a rendezvous that fails, a job secret
// refused) prints "fault_rank: <error>" and its facts, and exits 1.
//
//   fault_rank --victim R --after K --timeout-s T [--fault kill|stop|exit|skip|shape|op|dtype|wide|reduce|root]
//              [--iterations N] [--elements E] [--linger-s S] [--device cpu|cuda]
// --device cuda: the tensors on ddp::local_device() (for nccl; default cpu).
// A survivor stays S seconds (default 2) after its error before it exits.
#include <ddp/ddp.h>
#include <ddp/device.h>

#include "../support/error_facts.h"

#include <torch/torch.h>

#include <csignal>
#include <iostream>
#include <thread>

int main(int argc, char** argv) {
  int victim = 1, after = 3, timeout_s = 20, iterations = 1000, linger_s = 2;
  int64_t elements = 4 << 20;
  std::string fault = "kill", device = "cpu";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--fault" || flag == "--device") {
      (flag == "--fault" ? fault : device) = argv[i + 1];
      continue;
    }
    int value = std::stoi(argv[i + 1]);
    if (flag == "--victim")
      victim = value;
    else if (flag == "--after")
      after = value;
    else if (flag == "--timeout-s")
      timeout_s = value;
    else if (flag == "--iterations")
      iterations = value;
    else if (flag == "--elements")
      elements = value;
    else if (flag == "--linger-s")
      linger_s = value;
  }
  ddp::ProcessGroupPtr pg;
  try {
    pg = ddp::init_process_group(ddp::InitOptions().timeout(std::chrono::seconds(timeout_s)));
  } catch (const ddp::Error& e) {
    std::cerr << "fault_rank: " << e.what() << std::endl;
    ddp::testing::print_error_facts(std::cerr, e);
    return 1;
  }
  const auto start = std::chrono::steady_clock::now();
  const bool is_victim = pg->rank() == victim;
  const c10::Device on = device == "cuda" ? ddp::local_device() : c10::Device(c10::kCPU);
  try {
    for (int i = 0; i < iterations; ++i) {
      const bool faulty = is_victim && i == after;
      if (faulty && fault == "skip") continue;
      at::Tensor t = torch::ones({elements + (faulty && fault == "shape" ? 1 : 0)},
                                 !faulty             ? torch::kFloat
                                 : fault == "dtype" ? torch::kInt
                                 : fault == "wide"  ? torch::kDouble
                                                    : torch::kFloat)
                       .to(on);
      ddp::WorkPtr work;
      if (i == after && fault == "root") {
        work = pg->broadcast(t, faulty ? 1 : 0);
      } else if (faulty && fault == "op") {
        work = pg->broadcast(t);
      } else {
        work = pg->allreduce(t, faulty && fault == "reduce" ? ddp::ReduceOp::MAX : ddp::ReduceOp::SUM);
      }
      if (faulty && fault == "exit") {
        work->wait();
        return 0;
      }
      if (faulty && (fault == "kill" || fault == "stop")) raise(fault == "stop" ? SIGSTOP : SIGKILL);
      work->wait();
    }
    if (is_victim && fault == "skip") std::this_thread::sleep_for(std::chrono::hours(1));
  } catch (const ddp::Error& e) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
    const auto unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    std::cerr << "survivor rank " << pg->rank() << " failed after " << ms << " ms: " << e.what()
              << std::endl;
    ddp::testing::print_error_facts(std::cerr, e);
    std::cerr << "survivor rank " << pg->rank() << "'s error came at unix ms " << unix_ms
              << std::endl;
    // Rank 0 hosts the store through which the others learn the first
    // failure: stay a moment, as a job's rank 0 does while it cleans up.
    std::this_thread::sleep_for(std::chrono::seconds(linger_s));
    return 3;
  }
  return 0;
}
