// Work's completion contract (include/ddp/work.h): callbacks run once, in
// the order they were added, even when one is added from another thread
// while the completing thread is still running the earlier ones.
#include <ddp/work.h>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ddp
