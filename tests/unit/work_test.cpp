// Work's completion contract (include/ddp/work.h): callbacks run once, in
// the order they were added, even when one is added from another thread
// while the completing thread is still running the earlier ones. And the
// backends' task queue (collectives/task_queue.h): issue order, with
// operations that the caller's thread runs itself.
#include <ddp/errors.h>
#include <ddp/work.h>

#include "collectives/task_queue.h"
#include "support/raised.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ddp {
namespace {

using testing::raised;
using testing::Raised;

// The context of the queues' groups here: their Works' errors carry it.
ErrorContext test_group() { return ErrorContext{0, 1, "test", "", {}}; }

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
  detail::TaskQueue queue(test_group(), std::chrono::seconds(5), 2);
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
  // The group's error, about the late operation (the 21st), no peer's.
  Raised r = raised<CommunicationError>([&] { late->wait(); });
  ASSERT_TRUE(r) << "a Work issued after stop(): " << r;
  EXPECT_EQ(r.context.rank, 0) << r;
  EXPECT_EQ(r.context.world_size, 1) << r;
  EXPECT_EQ(r.context.backend, "test") << r;
  EXPECT_EQ(r.context.operation.rfind("op #20", 0), 0u) << r;
  EXPECT_TRUE(r.context.peers.empty()) << r;
}

// A body that records its name and thread, in the order bodies ran.
struct Trace {
  std::mutex mutex;
  std::vector<std::string> ran;
  std::vector<std::thread::id> threads;
  detail::TaskQueue::Body body(const std::string& name) {
    return [this, name](uint32_t, const Work&) -> std::exception_ptr {
      std::lock_guard<std::mutex> lock(mutex);
      ran.push_back(name);
      threads.push_back(std::this_thread::get_id());
      return nullptr;
    };
  }
};

TEST(TaskQueue, AClaimRunsOnTheCallerOnlyWhenTheQueueIsIdle) {
  detail::TaskQueue queue(test_group(), std::chrono::seconds(5), 1);
  std::atomic<bool> release{false};
  auto busy = queue.enqueue("op", "", {}, [&](uint32_t, const Work&) {
    while (!release) std::this_thread::yield();
    return std::exception_ptr();
  });
  EXPECT_FALSE(queue.claim("op", "", {}));  // a body runs
  release = true;
  busy->wait();
  auto claim = queue.claim("op", "", {});
  ASSERT_TRUE(claim);
  EXPECT_FALSE(queue.claim("op", "", {}));  // one claim at a time
  EXPECT_FALSE(claim->work->is_completed());
  queue.finish_claim(std::move(*claim), nullptr);
  auto again = queue.claim("op", "", {});  // idle again
  ASSERT_TRUE(again);
  EXPECT_NE(again->work->description().find("op #2 "), std::string::npos)
      << again->work->description();
  queue.finish_claim(std::move(*again), nullptr);
}

TEST(TaskQueue, WorkQueuedDuringAClaimWaitsForItAndCompletesAfterIt) {
  detail::TaskQueue queue(test_group(), std::chrono::seconds(5), 2);
  Trace trace;
  std::mutex mutex;
  std::string completed;
  auto note = [&](const WorkPtr& w, const std::string& name) {
    w->on_complete([&, name] {
      std::lock_guard<std::mutex> lock(mutex);
      completed += name;
    });
  };
  auto claim = queue.claim("claimed", "", {});
  ASSERT_TRUE(claim);
  note(claim->work, "A");
  WorkPtr later;
  std::thread other([&] { later = queue.enqueue("later", "", {}, trace.body("B")); });
  other.join();
  note(later, "B");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(later->is_completed());  // the workers wait for the claim
  trace.body("A")(claim->tag, *claim->work);
  queue.finish_claim(std::move(*claim), nullptr);
  later->wait();
  EXPECT_EQ(trace.ran, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(trace.threads[0], std::this_thread::get_id());
  EXPECT_NE(trace.threads[1], std::this_thread::get_id());
  std::lock_guard<std::mutex> lock(mutex);
  EXPECT_EQ(completed, "AB");
}

TEST(TaskQueue, AHandedOffClaimRunsBeforeWhatWasQueuedMeanwhile) {
  detail::TaskQueue queue(test_group(), std::chrono::seconds(5), 1);
  Trace trace;
  auto claim = queue.claim("claimed", "", {});
  ASSERT_TRUE(claim);
  WorkPtr claimed = claim->work;
  WorkPtr later = queue.enqueue("later", "", {}, trace.body("B"));
  queue.hand_off_claim(std::move(*claim), trace.body("A, rest"));
  later->wait();
  ASSERT_TRUE(claimed->is_completed());
  EXPECT_EQ(trace.ran, (std::vector<std::string>{"A, rest", "B"}));
  EXPECT_NE(trace.threads[0], std::this_thread::get_id());  // on the worker
}

TEST(TaskQueue, AClaimThatFailsCommunicatingBreaksTheQueue) {
  detail::TaskQueue queue(test_group(), std::chrono::seconds(5), 1);
  auto claim = queue.claim("claimed", "", {});
  ASSERT_TRUE(claim);
  WorkPtr failed = claim->work;
  ErrorContext vanished = failed->context().about({1});
  queue.finish_claim(std::move(*claim),
                     std::make_exception_ptr(CommunicationError(vanished, "peer 1 vanished")));
  EXPECT_THROW(failed->wait(), CommunicationError);
  EXPECT_NE(queue.broken_reason(), "");     // "" while healthy
  EXPECT_FALSE(queue.claim("op", "", {}));  // a broken queue fails what comes: enqueue()
  Trace trace;
  auto next = queue.enqueue("next", "", {}, trace.body("never"));
  // About the next operation, and the peer the failure that broke the queue
  // was about.
  Raised r = raised<CommunicationError>([&] { next->wait(); });
  ASSERT_TRUE(r) << r;
  EXPECT_EQ(r.context.rank, 0) << r;
  EXPECT_EQ(r.context.operation.rfind("next #", 0), 0u) << r;
  EXPECT_EQ(r.context.peers, std::vector<int>{1}) << r;
  EXPECT_TRUE(trace.ran.empty());
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
  detail::TaskQueue queue(test_group(), std::chrono::seconds(5), 2);
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
