#include <ddp/work.h>

#include <ddp/errors.h>

#include "base/mutex.h"
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

struct Work::Completion {
  mutable Mutex mutex;
  CondVar settled_cv;                          // signalled when settled
  bool done DDP_GUARDED_BY(mutex) = false;     // result set
  bool settled DDP_GUARDED_BY(mutex) = false;  // callbacks ran too
  std::chrono::steady_clock::time_point completed_at DDP_GUARDED_BY(mutex);
  std::exception_ptr error DDP_GUARDED_BY(mutex);
  std::vector<std::function<void()>> callbacks DDP_GUARDED_BY(mutex);
};

Work::Work(ErrorContext context, std::chrono::milliseconds default_timeout,
           std::vector<at::Tensor> outputs)
    : context_(std::move(context)),
      description_(describe(context_)),
      default_timeout_(default_timeout),
      outputs_(std::move(outputs)),
      completion_(std::make_unique<Completion>()),
      flight_record_(detail::flight::take_pending_record()) {}

Work::~Work() = default;

Work::Work(std::string description, std::chrono::milliseconds default_timeout,
           std::vector<at::Tensor> outputs)
    : Work(ErrorContext{-1, 0, "", std::move(description), {}}, default_timeout,
           std::move(outputs)) {}

void Work::wait(std::chrono::milliseconds timeout) {
  if (timeout.count() < 0) timeout = default_timeout_;
  Completion& c = *completion_;
  MutexLock lock(c.mutex);
  const bool settled =
      c.settled_cv.wait_for(c.mutex, timeout, [&]() DDP_REQUIRES(c.mutex) { return c.settled; });
  if (!settled) {
    TimeoutError error(context_, "not complete after " + std::to_string(timeout.count()) +
                                    " ms (Work::wait timeout). A peer may be stuck or "
                                    "issuing a different collective; run with "
                                    "DDP_DEBUG=detail to compare collectives across ranks.");
    lock.unlock();
    detail::flight::dump_after_error(std::string("timeout: ") + error.what());
    throw error;
  }
  if (c.error) std::rethrow_exception(c.error);
}

bool Work::is_completed() const {
  const Completion& c = *completion_;
  MutexLock lock(c.mutex);
  return c.done;
}

bool Work::is_success() const {
  const Completion& c = *completion_;
  MutexLock lock(c.mutex);
  return c.done && !c.error;
}

std::exception_ptr Work::exception() const {
  const Completion& c = *completion_;
  MutexLock lock(c.mutex);
  return c.error;
}

std::chrono::steady_clock::time_point Work::completion_time() const {
  const Completion& c = *completion_;
  MutexLock lock(c.mutex);
  return c.completed_at;
}

void Work::on_complete(std::function<void()> callback) {
  {
    Completion& c = *completion_;
    MutexLock lock(c.mutex);
    // Until the completing thread has run every callback, a new one joins
    // its queue: callbacks run in the order they were added, even when one
    // is added from another thread while the earlier ones are running
    // (backends chain the next Work's completion this way).
    if (!c.settled) {
      c.callbacks.push_back(std::move(callback));
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
  Completion& c = *completion_;
  {
    MutexLock lock(c.mutex);
    if (c.done) return;
    c.done = true;
    at = c.completed_at = std::chrono::steady_clock::now();
    c.error = error;
    callbacks.swap(c.callbacks);
  }
  if (flight_record_) {
    detail::flight::finished(flight_record_, error, at.time_since_epoch().count());
  }
  for (;;) {
    for (auto& callback : callbacks) callback();
    callbacks.clear();
    MutexLock lock(c.mutex);
    if (c.callbacks.empty()) {
      c.settled = true;
      break;
    }
    callbacks.swap(c.callbacks);  // added while the others ran
  }
  c.settled_cv.notify_all();
}

std::shared_ptr<Work> Work::completed(std::string description, std::vector<at::Tensor> outputs) {
  auto work = std::make_shared<Work>(std::move(description), std::chrono::milliseconds(0),
                                     std::move(outputs));
  work->finish();
  return work;
}

}  // namespace ddp
