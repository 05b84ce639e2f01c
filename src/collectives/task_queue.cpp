#include "collectives/task_queue.h"

#include "base/mutex.h"
#include "collectives/error_text.h"
#include "collectives/issue_order.h"
#include "collectives/no_sigpipe.h"

#include <ddp/errors.h>

#include <utility>

namespace ddp::detail {

TaskQueue::TaskQueue(ErrorContext group, std::chrono::milliseconds timeout, int threads)
    : group_(std::move(group)), timeout_(timeout) {
  SigpipeBlockedForNewThreads workers_write_to_sockets;
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work_loop(); });
}

TaskQueue::~TaskQueue() { stop(); }

void TaskQueue::stop() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
}

WorkPtr TaskQueue::issue(const char* kind, const std::string& detail,
                         std::vector<at::Tensor> outputs, uint32_t* tag, WorkPtr* previous) {
  *tag = next_tag_++;
  ErrorContext context = group_;
  context.operation =
      std::string(kind) + " #" + std::to_string(*tag) + (detail.empty() ? "" : " (" + detail + ")");
  auto work = std::make_shared<Work>(std::move(context), timeout_, std::move(outputs));
  *previous = std::exchange(last_, work);
  return work;
}

WorkPtr TaskQueue::enqueue(const char* kind, const std::string& detail,
                           std::vector<at::Tensor> outputs, Body body) {
  WorkPtr work;
  bool refused = false;
  GatePtr gate = take_pending_gate();  // taken even when refused: the operation fails at once
  {
    MutexLock lock(mutex_);
    refused = stopping_;  // no worker would run it
    Task task;
    work = issue(kind, detail, std::move(outputs), &task.tag, &task.previous);
    if (refused) {
      last_ = task.previous;  // it fails now: nothing is chained after it
    } else {
      task.work = work;
      task.body = std::move(body);
      task.gate = std::move(gate);
      if (task.gate) task.deadline = std::chrono::steady_clock::now() + timeout_;
      queue_.push_back(std::move(task));
    }
  }
  if (refused) {  // say so now, not at its timeout (outside the lock: callbacks run)
    work->finish(std::make_exception_ptr(
        CommunicationError(work->context(), "not run: the group is being destroyed")));
    return work;
  }
  queue_cv_.notify_one();  // outside the lock: the worker can take it at once
  return work;
}

std::optional<TaskQueue::Claim> TaskQueue::claim(const char* kind, const std::string& detail,
                                                 std::vector<at::Tensor> outputs) {
  Claim claim;
  {
    MutexLock lock(mutex_);
    // Idle: nothing queued or running, and the last Work complete (a
    // worker may still run its callbacks, as after any completion).
    if (stopping_ || claimed_ || running_ > 0 || !queue_.empty() || !broken_reason_.empty() ||
        (last_ && !last_->is_completed()) || gate_pending()) {
      return std::nullopt;
    }
    claim.work = issue(kind, detail, std::move(outputs), &claim.tag, &claim.previous);
    claimed_ = true;
  }
  claim.work->mark_started();
  return claim;
}

void TaskQueue::finish_claim(Claim claim, std::exception_ptr error) {
  note(error);
  finish_after(claim.previous, claim.work, error);
  bool queued = false;
  {
    MutexLock lock(mutex_);
    claimed_ = false;
    queued = !queue_.empty() || stopping_;
  }
  if (queued) queue_cv_.notify_all();  // what other threads issued meanwhile, or stop()
}

void TaskQueue::hand_off_claim(Claim claim, Body rest) {
  {
    MutexLock lock(mutex_);
    Task task;
    task.tag = claim.tag;
    task.work = std::move(claim.work);
    task.previous = std::move(claim.previous);
    task.body = std::move(rest);
    task.started = true;
    queue_.push_front(std::move(task));
    claimed_ = false;
  }
  queue_cv_.notify_all();
}

std::string TaskQueue::broken_reason() const {
  MutexLock lock(mutex_);
  return broken_reason_;
}

void TaskQueue::work_loop() {
  for (;;) {
    Task task;
    {
      MutexLock lock(mutex_);
      queue_cv_.wait(mutex_, [&]() DDP_REQUIRES(mutex_) {
        return (stopping_ || !queue_.empty()) && !claimed_;
      });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    const std::exception_ptr error = run(task);
    {
      MutexLock lock(mutex_);
      --running_;
    }
    finish_after(task.previous, task.work, error);
  }
}

std::exception_ptr TaskQueue::run(Task& task) {
  {
    MutexLock lock(mutex_);
    if (!broken_reason_.empty()) {
      // About the ranks the first failure named.
      return std::make_exception_ptr(
          CommunicationError(task.work->context().about(broken_peers_),
                             "not run: the group is broken by an earlier failure: " +
                                 broken_reason_));
    }
  }
  if (!task.started) task.work->mark_started();
  std::exception_ptr error = task.gate ? wait_for_gate(task) : nullptr;
  if (!error) error = task.body(task.tag, *task.work);
  note(error);
  return error;
}

std::exception_ptr TaskQueue::wait_for_gate(const Task& task) const {
  std::string why;
  try {
    if (wait_for_fence(task.gate->copied, task.deadline)) return nullptr;
    return std::make_exception_ptr(TimeoutError(
        task.work->context(),
        "the copy of its input to host memory (staging) did not finish within " +
            std::to_string(timeout_.count()) +
            " ms: the device is stuck, or the work that produces the tensor never ends"));
  } catch (const std::exception& e) {
    why = e.what();
  }
  return std::make_exception_ptr(CommunicationError(
      task.work->context(), "the copy of its input to host memory (staging) failed: " + why));
}

void TaskQueue::note(const std::exception_ptr& error) {
  if (!error) return;
  try {
    std::rethrow_exception(error);
  } catch (const CommunicationError& e) {
    MutexLock lock(mutex_);
    if (broken_reason_.empty()) {
      broken_reason_ = cited(e);
      broken_peers_ = e.context().peers;
    }
  } catch (...) {}
}

}  // namespace ddp::detail
