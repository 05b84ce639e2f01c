#include "collectives/task_queue.h"

#include "collectives/issue_order.h"
#include "collectives/no_sigpipe.h"

#include <ddp/errors.h>
#include <ddp/mutex.h>

namespace ddp::detail {

TaskQueue::TaskQueue(std::string where, std::chrono::milliseconds timeout, int threads)
    : where_(std::move(where)), timeout_(timeout) {
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

WorkPtr TaskQueue::enqueue(const char* kind, const std::string& detail,
                           std::vector<at::Tensor> outputs, Body body) {
  WorkPtr work;
  bool refused = false;
  {
    MutexLock lock(mutex_);
    const uint32_t tag = next_tag_++;
    work = std::make_shared<Work>(std::string(kind) + " #" + std::to_string(tag) +
                                      (detail.empty() ? "" : " (" + detail + ")") + " on " + where_,
                                  timeout_, std::move(outputs));
    refused = stopping_;  // no worker would run it
    if (!refused) {
      queue_.push_back(Task{tag, work, last_, std::move(body)});
      last_ = work;
    }
  }
  if (refused) {  // say so now, not at its timeout (outside the lock: callbacks run)
    work->finish(std::make_exception_ptr(CommunicationError(
        "ddp: " + work->description() + " not run: the group is being destroyed")));
    return work;
  }
  queue_cv_.notify_one();  // outside the lock: the worker can take it at once
  return work;
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
      queue_cv_.wait(mutex_, [&]() DDP_REQUIRES(mutex_) { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error = run(task);
    finish_after(task.previous, task.work, error);
  }
}

std::exception_ptr TaskQueue::run(Task& task) {
  {
    MutexLock lock(mutex_);
    if (!broken_reason_.empty()) {
      return std::make_exception_ptr(CommunicationError(
          "ddp: " + task.work->description() +
          " not run: the group is broken by an earlier failure: " + broken_reason_));
    }
  }
  task.work->mark_started();
  std::exception_ptr error = task.body(task.tag, *task.work);
  if (!error) return nullptr;
  try {
    std::rethrow_exception(error);
  } catch (const CommunicationError& e) {
    MutexLock lock(mutex_);
    if (broken_reason_.empty()) broken_reason_ = e.what();
  } catch (...) {}
  return error;
}

}  // namespace ddp::detail
