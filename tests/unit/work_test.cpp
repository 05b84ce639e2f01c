// Work's completion contract (include/ddp/work.h): callbacks run once, in
// the order they were added, even when one is added from another thread
// while the completing thread is still running the earlier ones.
#include <ddp/errors.h>
#include <ddp/work.h>

#include "collectives/task_queue.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

namespace ddp {
namespace {

TEST(Work, CallbackAddedWhileOthersRunRunsAfterThem) {
  Work work("test work", std::chrono::milliseconds(5000));
  std::mutex mutex;
  std::string order;
  std::atomic<bool> first_started{false};
  work.on_complete([&] {
    first_started = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::lock_guard<std::mutex> lock(mutex);
    order += "A";
  });
  std::thread completer([&] { work.finish(); });
  while (!first_started) std::this_thread::yield();
  // The Work is complete, its first callback still running on `completer`.
  ASSERT_TRUE(work.is_completed());
  work.on_complete([&] {
    std::lock_guard<std::mutex> lock(mutex);
    order += "B";
  });
  work.wait();  // returns once both ran
  {
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_EQ(order, "AB");
  }
  completer.join();
  work.on_complete([&] { order += "C"; });  // settled: runs here, at once
  EXPECT_EQ(order, "ABC");
}

TEST(TaskQueue, RunsInIssueOrderAndRefusesWorkAfterStop) {
  detail::TaskQueue queue("rank 0 of 1 [test]", std::chrono::seconds(5), 2);
  std::mutex mutex;
  std::string order;
  std::vector<WorkPtr> works;
  for (int i = 0; i < 20; ++i) {
    works.push_back(queue.enqueue("op", "", {}, [](uint32_t, const Work&) { return nullptr; }));
    works.back()->on_complete([&, i] {
      std::lock_guard<std::mutex> lock(mutex);
      order += std::to_string(i) + ",";
    });
  }
  for (auto& w : works) w->wait();
  EXPECT_EQ(order, "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,");
  queue.stop();
  auto late = queue.enqueue("op", "", {}, [](uint32_t, const Work&) { return nullptr; });
  ASSERT_TRUE(late->is_completed());  // at once, not at its timeout
  try {
    late->wait();
    FAIL() << "a Work issued after stop() succeeded";
  } catch (const CommunicationError& e) {
    EXPECT_NE(std::string(e.what()).find("the group is being destroyed"), std::string::npos)
        << e.what();
  }
}

bool sigpipe_blocked() {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, SIGPIPE) == 1;
}

// A worker's write to a closed socket must fail with EPIPE, not kill the
// process (collectives/no_sigpipe.h); the caller's own mask is left alone.
TEST(TaskQueue, WorkersBlockSigpipeAndTheCallerKeepsItsMask) {
  ASSERT_FALSE(sigpipe_blocked());
  detail::TaskQueue queue("rank 0 of 1 [test]", std::chrono::seconds(5), 2);
  EXPECT_FALSE(sigpipe_blocked());
  std::atomic<bool> blocked{false};
  queue
      .enqueue("op", "", {},
               [&](uint32_t, const Work&) {
                 blocked = sigpipe_blocked();
                 return nullptr;
               })
      ->wait();
  EXPECT_TRUE(blocked);
}

}  // namespace
}  // namespace ddp
