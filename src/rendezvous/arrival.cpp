#include "rendezvous/arrival.h"

#include <ddp/errors.h>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <thread>

namespace ddp::detail {

void wait_for_all_ranks(const StorePtr& store, int rank, int size,
                        std::chrono::milliseconds timeout, const std::string& label) {
  const std::string prefix = "ddp/" + label + "/arrived";
  store->set(prefix + "/" + std::to_string(rank), std::vector<uint8_t>{1});
  store->add(prefix + "/count", 1);

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  int64_t arrived = 0;
  while ((arrived = store->add(prefix + "/count", 0)) < size) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string missing;
      for (int r = 0; r < size; ++r) {
        if (!store->check({prefix + "/" + std::to_string(r)})) {
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
      }
      throw TimeoutError("ddp: rank " + std::to_string(rank) + ": " + label + " timed out after " +
                         std::to_string(timeout.count()) + " ms: " + std::to_string(arrived) +
                         " of " + std::to_string(size) + " ranks arrived (missing: " + missing +
                         "). Start every rank with the same WORLD_SIZE and master address, or "
                         "raise the rendezvous timeout.");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
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
  auto pause = std::chrono::milliseconds(1);
  for (int r = 0; r < size; ++r) {
    const std::string key = prefix + std::to_string(r);
    while (!store->check({key})) {
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string missing;
        int arrived = 0;
        for (int m = 0; m < size; ++m) {
          if (store->check({prefix + std::to_string(m)})) {
            ++arrived;
          } else {
            missing += (missing.empty() ? "" : ", ") + std::to_string(m);
          }
        }
        throw TimeoutError("ddp: rank " + std::to_string(rank) + ": " + what + " timed out after " +
                           std::to_string(timeout.count()) + " ms: " + std::to_string(arrived) +
                           " of " + std::to_string(size) + " ranks arrived (missing: " + missing +
                           ")" + why_missing);
      }
      std::this_thread::sleep_for(pause);  // backing off: N ranks poll one store
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
    auto bytes = store->get(key);
    all[r].assign(bytes.begin(), bytes.end());
  }
  return all;
}

}  // namespace ddp::detail
