#include "collectives/gloo/failure_reports.h"

#include <ddp/errors.h>

#include "base/bounded.h"
#include "base/store_values.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <thread>

namespace ddp::detail {
namespace {

// How long a clean close's store call may take before the store counts as
// unresponsive: generous for a loaded host, short next to any timeout.
constexpr std::chrono::milliseconds kCloseLimit(3000);
// What a body's own waits leave of the caller's deadline.
constexpr std::chrono::milliseconds kMargin(100);

// Not a std::string: a call left blocked on an unanswering store (see
// bounded() below) may still use it while the process exits and destroys
// its static objects.
constexpr char kFirst[] = "ddp/gloo/first_failure";
std::string failed_key(int rank) { return "ddp/gloo/failed/" + std::to_string(rank); }
std::string closed_key(int rank) { return "ddp/gloo/closed/" + std::to_string(rank); }

struct Unanswered {};

}  // namespace

FailureReports::FailureReports(StorePtr store, int rank, int size)
    : store_(std::move(store)), rank_(rank), size_(size) {}

// The body runs on a helper thread and owns its captures: if the store never
// answers, the thread stays blocked and this rank goes on without it.
template <typename T>
std::optional<T> FailureReports::bounded(std::function<T(const StorePtr&, Deadline)> body,
                                         Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (!answers_ || left <= kMargin) return std::nullopt;
  try {
    StorePtr store = store_;
    const Deadline own = deadline - kMargin;
    return run_bounded<T>([store, body, own] { return body(store, own); }, left,
                          [] { throw Unanswered{}; });
  } catch (const Unanswered&) {
    answers_ = false;
  } catch (const std::exception&) {
    answers_ = false;  // the store's host is gone (connection refused or reset)
  }
  return std::nullopt;
}

std::optional<std::string> FailureReports::report(const std::string& report,
                                                  Deadline deadline) {
  const int rank = rank_;
  return bounded<std::string>(
      [rank, report](const StorePtr& store, Deadline deadline) -> std::string {
        store->set(failed_key(rank), store_bytes(report));
        if (store->add(std::string(kFirst) + "/count", 1) == 1) {
          store->set(kFirst, store_bytes(report));
          return report;
        }
        // Another rank counted first and is writing its report: wait briefly
        // (a third of the budget at most: the other calls need the rest).
        deadline = std::min(deadline, std::chrono::steady_clock::now() + kFailureBudget / 3);
        while (!store->check({kFirst})) {
          if (std::chrono::steady_clock::now() >= deadline) return "";
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return store_text(store->get(kFirst));
      },
      deadline);
}

std::optional<std::vector<int>> FailureReports::silent(Deadline deadline) {
  const int rank = rank_, size = size_;
  return bounded<std::vector<int>>(
      [rank, size](const StorePtr& store, Deadline deadline) {
        for (;;) {
          std::vector<int> silent;
          for (int r = 0; r < size; ++r) {
            if (r != rank && !store->check({failed_key(r)})) silent.push_back(r);
          }
          if (silent.size() <= 1 || std::chrono::steady_clock::now() >= deadline) return silent;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      },
      deadline);
}

std::optional<std::string> FailureReports::about(int peer, std::chrono::milliseconds patience,
                                                 Deadline deadline) {
  return bounded<std::string>(
      [peer, patience](const StorePtr& store, Deadline deadline) -> std::string {
        deadline = std::min(deadline, std::chrono::steady_clock::now() + patience);
        for (;;) {
          if (store->check({failed_key(peer)})) {
            return "rank " + std::to_string(peer) +
                   " had failed: " + store_text(store->get(failed_key(peer)));
          }
          if (store->check({closed_key(peer)})) {
            return "rank " + std::to_string(peer) +
                   " had closed its process group without a "
                   "failure (its program finished, or left training, before this collective)";
          }
          if (std::chrono::steady_clock::now() >= deadline) return "";
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      },
      deadline);
}

void FailureReports::closed_cleanly() {
  const int rank = rank_;
  bounded<bool>(
      [rank](const StorePtr& store, Deadline) {
        store->set(closed_key(rank), store_bytes("1"));
        return true;
      },
      std::chrono::steady_clock::now() + kCloseLimit);
}

}  // namespace ddp::detail
