// Where the futures of the backend's Works complete (work.h): on threads of
// their own, never on the thread of ddp's backend that finished the
// collective. A future's callbacks run where it completes, and PyTorch's
// callbacks may issue a collective and wait for it (PowerSGD's hook does):
// on the backend's thread that wait would block the very thread that must
// run the collective. Here it blocks one completion thread, and the next
// completion takes an idle one or starts another.
//
// Contract
// - post() returns at once; tasks start in the order posted.
// - A task never waits for a thread that a waiting task holds: while there
//   are more queued tasks than idle threads a new thread starts, up to
//   kMaxThreads (or as many as the system gives); past that, tasks queue.
// - Process-wide and never destroyed: idle threads wait for the next task
//   until the process exits. Python must not finalize while a task runs (a
//   task that releases a Python callback then takes the GIL, which a
//   finalizing interpreter refuses by ending the thread: std::terminate);
//   ddp_torch waits for drain() at exit.

#pragma once

#include "base/mutex.h"

#include <chrono>
#include <deque>
#include <functional>

namespace ddp_torch {

class Completions {
 public:
  static constexpr int kMaxThreads = 64;

  static Completions& instance();
  void post(std::function<void()> task);
  // Waits until no task is queued or running, at most `timeout`; whether
  // that happened.
  bool drain(std::chrono::milliseconds timeout);

 private:
  Completions() = default;
  void serve();

  ddp::Mutex mutex_;
  ddp::CondVar queued_;  // a task was posted
  ddp::CondVar became_idle_;
  std::deque<std::function<void()>> tasks_ DDP_GUARDED_BY(mutex_);
  int threads_ DDP_GUARDED_BY(mutex_) = 0;
  int idle_ DDP_GUARDED_BY(mutex_) = 0;
};

}  // namespace ddp_torch
