#include "hooks/hook_runner.h"

#include <ddp/errors.h>

#include "base/mutex.h"
#include "flight/recorder.h"

namespace ddp::detail {

HookRunner::HookRunner(CommHook hook) : hook_(std::move(hook)), thread_([this] { loop(); }) {}

HookRunner::~HookRunner() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

FuturePtr HookRunner::submit(GradBucket bucket) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
  {
    MutexLock lock(mutex_);
    queue_.emplace_back(std::move(bucket), future);
  }
  cv_.notify_one();
  return future;
}

void HookRunner::loop() {
  for (;;) {
    MutexLock lock(mutex_);
    cv_.wait(mutex_, [&]() DDP_REQUIRES(mutex_) { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    GradBucket bucket = std::move(queue_.front().first);
    FuturePtr future = std::move(queue_.front().second);
    queue_.pop_front();
    lock.unlock();
    try {
      flight::BucketScope in_bucket(static_cast<int>(bucket.index()));
      FuturePtr result = hook_(bucket);
      result->addCallback([future](c10::ivalue::Future& done) {
        if (done.hasError()) {
          future->setError(done.exception_ptr());
        } else {
          future->markCompleted(done.value());
        }
      });
    } catch (...) {
      future->setError(std::current_exception());
    }
  }
}

at::Tensor wait_for(const FuturePtr& future, const ProcessGroup& group, const std::string& what) {
  const std::chrono::milliseconds timeout = group.timeout();
  auto signal = std::make_shared<std::pair<Mutex, CondVar>>();
  future->addCallback([signal](c10::ivalue::Future&) {
    MutexLock lock(signal->first);
    signal->second.notify_all();
  });
  MutexLock lock(signal->first);
  if (!signal->second.wait_for(signal->first, timeout, [&] { return future->completed(); })) {
    throw TimeoutError(group.error_context(),
                       what + " not complete after " + std::to_string(timeout.count()) + " ms");
  }
  if (future->hasError()) std::rethrow_exception(future->exception_ptr());
  return future->value().toTensor();
}

}  // namespace ddp::detail
