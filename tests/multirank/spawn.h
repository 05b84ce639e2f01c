// The multirank harness (gloo's BaseTest::spawn shape): one thread per rank
// over one in-memory store; every rank's exception is collected and the
// first one rethrown on the test thread.
#pragma once

#include <ddp/init.h>
#include <ddp/store.h>

#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <exception>
#include <functional>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

namespace ddp::testing {

inline void spawn(int size, const std::function<void(int rank, StorePtr store)>& body) {
  // One intra-op thread in every rank and on the test thread, as in the
  // process tier (support/rank_gtest_main.cpp): ranks sharing a process on
  // two cores would otherwise race for them, and a BLAS kernel's result can
  // differ in the last bit with the threads it got (MKL chooses at run time),
  // which the tests' bit-for-bit comparisons with a one-process oracle
  // cannot allow. Threads started later take the global setting.
  at::set_num_threads(1);
  StorePtr store = c10::make_intrusive<c10d::HashStore>();
  std::mutex mutex;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        body(rank, store);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

// A group of the default backend per rank on the shared store, with a
// test-friendly timeout.
inline ProcessGroupPtr make_group(
    StorePtr store, int rank, int size,
    InitOptions options = InitOptions().timeout(std::chrono::seconds(60))) {
  return new_process_group(std::move(store), rank, size, options);
}

// A group of `backend` (a registered name) per rank, for tests swept over
// the backends.
inline ProcessGroupPtr make_group(const std::string& backend, StorePtr store, int rank, int size,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  return make_group(std::move(store), rank, size, InitOptions().backend(backend).timeout(timeout));
}

// Whether `text` contains `part`: for output that is not an error's (a
// timeline's events). Tests of errors check their type and facts
// (support/raised.h), never their text.
inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace ddp::testing
