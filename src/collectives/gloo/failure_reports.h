// The failure bookkeeping of the Gloo group, kept in the store hosted by
// rank 0: which rank failed first and how, which ranks have reported a
// failure, and which closed their group without one. Every call is bounded
// (the store's host may itself be the rank that is stopped or cut off, and
// libtorch's TCPStore then blocks in recv() forever): once a call has not
// been answered in time, the store counts as unresponsive and later calls
// return nothing at once, so failure handling and teardown never hang.
// A failure's calls share one deadline (kFailureBudget from the failure):
// whatever the store does, a rank's error comes within Gloo's timeout plus
// that budget, on the side cut off from the store as on the other.
#pragma once

#include <ddp/store.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ddp::detail {

// How long one failure's bookkeeping may take in all, store calls included.
constexpr std::chrono::milliseconds kFailureBudget{1000};

class FailureReports {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  FailureReports(StorePtr store, int rank, int size);

  // Each call below answers by `deadline`; a store that has not answered a
  // call by then counts as unresponsive (nullopt, here and from then on).
  // A call made after its deadline returns nullopt without asking.

  // Records this rank's failure; returns the job's first failure report
  // (this one if it is the first; "" if another's could not be read in
  // time).
  std::optional<std::string> report(const std::string& report, Deadline deadline);
  // Ranks other than this one with no failure report by `deadline`
  // (earlier once at most one is left).
  std::optional<std::vector<int>> silent(Deadline deadline);
  // What is known of `peer` within `patience`: its failure report, that it
  // closed its group without one, or "" for nothing.
  std::optional<std::string> about(int peer, std::chrono::milliseconds patience,
                                   Deadline deadline);
  // Teardown without a failure: lets peers that are still waiting on this
  // rank say so rather than guess a crash.
  void closed_cleanly();
  // False once a call went unanswered.
  bool store_answers() const { return answers_; }

 private:
  // Runs `body` with the deadline its own waits must end by (a little
  // before `deadline`, so that an answering store is never taken for a
  // silent one).
  template <typename T>
  std::optional<T> bounded(std::function<T(const StorePtr&, Deadline)> body, Deadline deadline);

  const StorePtr store_;
  const int rank_, size_;
  std::atomic<bool> answers_{true};
};

}  // namespace ddp::detail
