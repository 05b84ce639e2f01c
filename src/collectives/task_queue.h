// The ordered task queue of a backend: operations are queued by the caller,
// run on `threads` worker threads, and their Works complete in issue order
// (collectives/issue_order.h). Each task has a tag, its issue number, which
// backends use to match messages across ranks when several run at once.
//
// Failures follow the ProcessGroup contract: a task whose body returns a
// CommunicationError breaks the queue; every later task fails without
// running, citing the first failure.
//
// A small operation may skip the hand-off to a worker: when the queue is
// idle (nothing queued, no body running), claim() issues its Work for the
// calling thread to run at once, and the workers take nothing up until the
// claim ends, so issue order holds exactly. The caller ends it by finishing
// the Work, or by handing the rest of the operation to a worker (an
// operation whose peers are not there yet), ahead of whatever other threads
// queued meanwhile.
//
// A staged operation's input copies (collectives/staging_gate.h): enqueue()
// takes the calling thread's pending gate, and the worker waits for the
// copies (within the Work's timeout) before it runs the body; a failed or
// late copy breaks the queue. claim() refuses while a gate is pending.
#pragma once

#include <ddp/work.h>

#include "base/mutex.h"
#include "collectives/staging_gate.h"

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace ddp::detail {

class TaskQueue {
 public:
  // Runs one operation: returns null on success, else the error its Work
  // completes with. Must not throw.
  using Body = std::function<std::exception_ptr(uint32_t tag, const Work& work)>;

  // `group` is the group's error context (ProcessGroup::error_context()):
  // each Work's context is it with the operation named; `timeout` is every
  // Work's default wait timeout.
  TaskQueue(ErrorContext group, std::chrono::milliseconds timeout, int threads);
  // Runs what is queued, then joins the workers (see stop()).
  ~TaskQueue();
  TaskQueue(const TaskQueue&) = delete;
  TaskQueue& operator=(const TaskQueue&) = delete;

  // Queues `body` and returns its Work, whose operation is
  // "<kind> #<tag> (<detail>)".
  WorkPtr enqueue(const char* kind, const std::string& detail, std::vector<at::Tensor> outputs,
                  Body body);

  // An operation the calling thread runs itself (see above).
  struct Claim {
    uint32_t tag = 0;
    WorkPtr work;      // started (Work::mark_started)
    WorkPtr previous;  // completes before `work`; null for the first
  };
  // A claim when the queue is idle and healthy, else nullopt (enqueue()).
  std::optional<Claim> claim(const char* kind, const std::string& detail,
                             std::vector<at::Tensor> outputs);
  // Ends a claim: its Work completes with `error` (null: success) once the
  // previous one has; a CommunicationError breaks the queue as a body's does.
  void finish_claim(Claim claim, std::exception_ptr error);
  // Ends a claim by queueing `rest` first: a worker runs it and completes
  // the claim's Work with what it returns.
  void hand_off_claim(Claim claim, Body rest);

  // Runs the tasks already queued, then joins the workers. An owner whose
  // bodies use its members calls this first in its destructor. Idempotent.
  void stop();

  // "" while healthy; else the failure that broke the queue, as later
  // errors cite it (without its "ddp: ", collectives/error_text.h).
  std::string broken_reason() const;

 private:
  struct Task {
    uint32_t tag;
    WorkPtr work;
    WorkPtr previous;  // null for the first
    Body body;
    bool started = false;  // a claim's rest: its Work was marked started
    GatePtr gate;          // null: nothing to wait for
    std::chrono::steady_clock::time_point deadline;  // the gate's, with one
  };
  void work_loop();
  std::exception_ptr run(Task& task);
  // Waits for a task's gate: null once it passed, else why not.
  std::exception_ptr wait_for_gate(const Task& task) const;
  // A Work numbered and chained after the last one issued.
  WorkPtr issue(const char* kind, const std::string& detail, std::vector<at::Tensor> outputs,
                uint32_t* tag, WorkPtr* previous) DDP_REQUIRES(mutex_);
  // A body's result: a CommunicationError breaks the queue.
  void note(const std::exception_ptr& error);

  const ErrorContext group_;
  const std::chrono::milliseconds timeout_;

  mutable Mutex mutex_;
  CondVar queue_cv_;  // signalled on enqueue and stop
  std::deque<Task> queue_ DDP_GUARDED_BY(mutex_);
  uint32_t next_tag_ DDP_GUARDED_BY(mutex_) = 0;
  WorkPtr last_ DDP_GUARDED_BY(mutex_);  // the last Work issued
  bool stopping_ DDP_GUARDED_BY(mutex_) = false;
  int running_ DDP_GUARDED_BY(mutex_) = 0;       // bodies running on workers
  bool claimed_ DDP_GUARDED_BY(mutex_) = false;  // a caller runs one; workers wait
  std::string broken_reason_ DDP_GUARDED_BY(mutex_);  // "" while healthy
  // The ranks the error that broke the queue is about (ErrorContext::peers).
  std::vector<int> broken_peers_ DDP_GUARDED_BY(mutex_);
  std::vector<std::thread> workers_;  // started in the constructor, joined by stop()
};

}  // namespace ddp::detail
