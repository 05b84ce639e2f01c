// The failure bookkeeping of the Gloo group, kept in the store hosted by
// rank 0: which rank failed first and how, which ranks have reported a
// failure, and which closed their group without one. Every call is bounded
// (the store's host may itself be the rank that is stopped or cut off, and
// libtorch's TCPStore then blocks in recv() forever): once a call has not
// been answered in time, the store counts as unresponsive and later calls
// return nothing at once, so failure handling and teardown never hang.
#pragma once

#include <ddp/store.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ddp::detail {

class FailureReports {
 public:
  FailureReports(StorePtr store, int rank, int size);

  // Records this rank's failure; returns the job's first failure report
  // (this one if it is the first; "" if another's could not be read in
  // time). nullopt: the store did not answer.
  std::optional<std::string> report(const std::string& report);
  // Ranks other than this one with no failure report after `patience`
  // (earlier once at most one is left). nullopt: the store did not answer.
  std::optional<std::vector<int>> silent(std::chrono::milliseconds patience);
  // What is known of `peer` within `patience`: its failure report, that it
  // closed its group without one, or "" for nothing. nullopt: no answer.
  std::optional<std::string> about(int peer, std::chrono::milliseconds patience);
  // Teardown without a failure: lets peers that are still waiting on this
  // rank say so rather than guess a crash.
  void closed_cleanly();
  // False once a call went unanswered.
  bool store_answers() const { return answers_; }

 private:
  template <typename T>
  std::optional<T> bounded(std::function<T(const StorePtr&)> body, std::chrono::milliseconds extra);

  const StorePtr store_;
  const int rank_, size_;
  std::atomic<bool> answers_{true};
};

}  // namespace ddp::detail
