#include "completions.h"

#include <system_error>
#include <thread>
#include <utility>

namespace ddp_torch {

Completions& Completions::instance() {
  // Leaked: its threads outlive every static destructor.
  static Completions* completions = new Completions();
  return *completions;
}

void Completions::post(std::function<void()> task) {
  ddp::MutexLock lock(mutex_);
  tasks_.push_back(std::move(task));
  queued_.notify_one();
  // Every queued task has an idle thread to take it, or no more may start.
  if (static_cast<int>(tasks_.size()) <= idle_ || threads_ >= kMaxThreads) return;
  ++threads_;
  try {
    std::thread([this] { serve(); }).detach();
  } catch (const std::system_error&) {
    // No thread to be had: the queued task waits for a running one; with
    // none at all, it runs here rather than never.
    if (--threads_ > 0) return;
    std::function<void()> orphan = std::move(tasks_.back());
    tasks_.pop_back();
    lock.unlock();
    orphan();
  }
}

bool Completions::drain(std::chrono::milliseconds timeout) {
  ddp::MutexLock lock(mutex_);
  return became_idle_.wait_for(mutex_, timeout, [this]() DDP_REQUIRES(mutex_) {
    return tasks_.empty() && idle_ == threads_;
  });
}

void Completions::serve() {
  ddp::MutexLock lock(mutex_);
  for (;;) {
    ++idle_;
    became_idle_.notify_all();
    queued_.wait(mutex_, [this]() DDP_REQUIRES(mutex_) { return !tasks_.empty(); });
    --idle_;
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    // What it held (a future, tensors, Python callbacks) goes before the
    // lock is taken again: dropping a Python object takes the GIL.
    task = nullptr;
    lock.lock();
  }
}

}  // namespace ddp_torch
