#include "base/arrival.h"

#include "base/setup_cancel.h"

#include <ddp/errors.h>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <thread>

namespace ddp::detail {
namespace {

// Sleeps between two polls of the store, 1 ms doubling up to 50 ms: N ranks
// poll one store.
class Backoff {
 public:
  void pause() {
    std::this_thread::sleep_for(pause_);
    pause_ = std::min(pause_ * 2, std::chrono::milliseconds(50));
  }

 private:
  std::chrono::milliseconds pause_{1};
};

// "ddp: rank R of N: <what>: timed out after T ms: A of N ranks arrived
// (missing: ...)<after>", the missing ranks (its peers) being those without
// a key `key_prefix`<r> in `store`.
TimeoutError arrival_timeout(const StorePtr& store, const std::string& key_prefix, int rank,
                             int size, std::chrono::milliseconds timeout, const std::string& what,
                             const std::string& after) {
  std::string missing;
  std::vector<int> peers;
  for (int r = 0; r < size; ++r) {
    if (!store->check({key_prefix + std::to_string(r)})) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      peers.push_back(r);
    }
  }
  const int arrived = size - static_cast<int>(peers.size());
  return TimeoutError(ErrorContext{rank, size, "", what, peers},
                      "timed out after " + std::to_string(timeout.count()) +
                          " ms: " + std::to_string(arrived) + " of " + std::to_string(size) +
                          " ranks arrived (missing: " + missing + ")" + after);
}

}  // namespace

bool wait_for_key(const StorePtr& store, const std::string& key,
                  std::chrono::steady_clock::time_point deadline) {
  return wait_for_keys(store, {key}, deadline);
}

bool wait_for_keys(const StorePtr& store, const std::vector<std::string>& keys,
                   std::chrono::steady_clock::time_point deadline) {
  Backoff backoff;
  while (!store->check(keys)) {
    throw_if_setup_cancelled();
    if (std::chrono::steady_clock::now() >= deadline) return false;
    backoff.pause();
  }
  return true;
}

void wait_for_all_ranks(const StorePtr& store, int rank, int size,
                        std::chrono::milliseconds timeout, const std::string& label) {
  const std::string prefix = "ddp/" + label + "/arrived";
  store->set(prefix + "/" + std::to_string(rank), std::vector<uint8_t>{1});
  store->add(prefix + "/count", 1);

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Backoff backoff;
  while (store->add(prefix + "/count", 0) < size) {
    throw_if_setup_cancelled();
    if (std::chrono::steady_clock::now() >= deadline) {
      throw arrival_timeout(store, prefix + "/", rank, size, timeout, label,
                            ". Start every rank with the same WORLD_SIZE and master address, or "
                            "raise the rendezvous timeout.");
    }
    backoff.pause();
  }
}

std::vector<std::string> allgather_on_store(const StorePtr& store, const std::string& prefix,
                                            int rank, int size, const std::string& mine,
                                            std::chrono::milliseconds timeout,
                                            const std::string& what,
                                            const std::string& why_missing) {
  store->set(prefix + std::to_string(rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::vector<std::string> all(size);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int r = 0; r < size; ++r) {
    const std::string key = prefix + std::to_string(r);
    if (!wait_for_key(store, key, deadline)) {
      throw arrival_timeout(store, prefix, rank, size, timeout, what, why_missing);
    }
    auto bytes = store->get(key);
    all[r].assign(bytes.begin(), bytes.end());
  }
  return all;
}

}  // namespace ddp::detail
