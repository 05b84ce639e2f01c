// A rank that fails mid-collective: every rank loops allreduces of 16 MB;
// the victim issues its K-th one and then, by --fault,
//   kill: kills itself with SIGKILL while the others are inside it;
//   stop: stops itself with SIGSTOP (frozen, its connections still open);
//   exit: completes it and returns 0 from main (its group closes normally).
// Survivors must fail within the timeout with an error naming the victim:
// they print it and exit 3 (0 would mean the fault went unnoticed).
//
//   fault_rank --victim R --after K --timeout-s T [--fault kill|stop|exit]
#include <ddp/ddp.h>

#include <torch/torch.h>

#include <csignal>
#include <iostream>
#include <thread>

int main(int argc, char** argv) {
  int victim = 1, after = 3, timeout_s = 20;
  std::string fault = "kill";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--fault") {
      fault = argv[i + 1];
      continue;
    }
    int value = std::stoi(argv[i + 1]);
    if (flag == "--victim")
      victim = value;
    else if (flag == "--after")
      after = value;
    else if (flag == "--timeout-s")
      timeout_s = value;
  }
  auto pg = ddp::init_process_group(ddp::InitOptions().timeout(std::chrono::seconds(timeout_s)));
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 1000; ++i) {
      at::Tensor t = torch::ones({4 << 20});
      auto work = pg->allreduce(t);
      if (pg->rank() == victim && i == after) {
        if (fault == "exit") {
          work->wait();
          return 0;
        }
        raise(fault == "stop" ? SIGSTOP : SIGKILL);
      }
      work->wait();
    }
  } catch (const ddp::CommunicationError& e) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::steady_clock::now() - start)
                  .count();
    std::cerr << "survivor rank " << pg->rank() << " failed after " << ms << " ms: " << e.what()
              << std::endl;
    // Rank 0 hosts the store through which the others learn the first
    // failure: stay a moment, as a job's rank 0 does while it cleans up.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    return 3;
  }
  return 0;
}
