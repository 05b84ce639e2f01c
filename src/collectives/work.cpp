#include <ddp/mutex.h>
#include <ddp/work.h>

#include <ddp/errors.h>

#include "flight/clock.h"
#include "flight/recorder.h"

namespace ddp {

namespace {

// "allreduce #12 (...) on rank 1 of 2 [gloo]": the operation, then the rest.
std::string describe(const ErrorContext& context) {
  ErrorContext group = context;
  group.operation.clear();
  const std::string where = format_context(group);
  return where.empty() ? context.operation : context.operation + " on " + where;
}

}  // namespace

Work::Work(ErrorContext context, std::chrono::milliseconds default_timeout,
           std::vector<at::Tensor> outputs)
    : context_(std::move(context)),
      description_(describe(context_)),
      default_timeout_(default_timeout),
      outputs_(std::move(outputs)),
      flight_record_(detail::flight::take_pending_record()) {}

Work::Work(std::string description, std::chrono::milliseconds default_timeout,
           std::vector<at::Tensor> outputs)
    : Work(ErrorContext{-1, 0, "", std::move(description), {}}, default_timeout,
           std::move(outputs)) {}

void Work::wait(std::chrono::milliseconds timeout) {
  if (timeout.count() < 0) timeout = default_timeout_;
  MutexLock lock(mutex_);
  if (!done_cv_.wait_for(mutex_, timeout, [&]() DDP_REQUIRES(mutex_) { return settled_; })) {
    TimeoutError error(context_, "not complete after " + std::to_string(timeout.count()) +
                                    " ms (Work::wait timeout). A peer may be stuck or "
                                    "issuing a different collective; run with "
                                    "DDP_DEBUG=detail to compare collectives across ranks.");
    lock.unlock();
    detail::flight::dump_after_error(std::string("timeout: ") + error.what());
    throw error;
  }
  if (error_) std::rethrow_exception(error_);
}

bool Work::is_completed() const {
  MutexLock lock(mutex_);
  return done_;
}

bool Work::is_success() const {
  MutexLock lock(mutex_);
  return done_ && !error_;
}

std::exception_ptr Work::exception() const {
  MutexLock lock(mutex_);
  return error_;
}

std::chrono::steady_clock::time_point Work::completion_time() const {
  MutexLock lock(mutex_);
  return completed_at_;
}

void Work::on_complete(std::function<void()> callback) {
  {
    MutexLock lock(mutex_);
    // Until the completing thread has run every callback, a new one joins
    // its queue: callbacks run in the order they were added, even when one
    // is added from another thread while the earlier ones are running
    // (backends chain the next Work's completion this way).
    if (!settled_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

void Work::mark_started() {
  if (flight_record_) detail::flight::started(flight_record_, detail::flight::now_ticks());
}

void Work::finish(std::exception_ptr error) {
  std::vector<std::function<void()>> callbacks;
  std::chrono::steady_clock::time_point at;
  {
    MutexLock lock(mutex_);
    if (done_) return;
    done_ = true;
    at = completed_at_ = std::chrono::steady_clock::now();
    error_ = error;
    callbacks.swap(callbacks_);
  }
  if (flight_record_) {
    detail::flight::finished(flight_record_, error, at.time_since_epoch().count());
  }
  for (;;) {
    for (auto& callback : callbacks) callback();
    callbacks.clear();
    MutexLock lock(mutex_);
    if (callbacks_.empty()) {
      settled_ = true;
      break;
    }
    callbacks.swap(callbacks_);  // added while the others ran
  }
  done_cv_.notify_all();
}

std::shared_ptr<Work> Work::completed(std::string description, std::vector<at::Tensor> outputs) {
  auto work = std::make_shared<Work>(std::move(description), std::chrono::milliseconds(0),
                                     std::move(outputs));
  work->finish();
  return work;
}

}  // namespace ddp
