#include "hooks/hook_runner.h"

#include <ddp/errors.h>

namespace ddp::detail {

HookRunner::HookRunner(CommHook hook) : hook_(std::move(hook)), thread_([this] { loop(); }) {}

HookRunner::~HookRunner() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

FuturePtr HookRunner::submit(GradBucket bucket) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(std::move(bucket), future);
  }
  cv_.notify_one();
  return future;
}

void HookRunner::loop() {
  for (;;) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    auto [bucket, future] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    try {
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

at::Tensor wait_for(const FuturePtr& future, std::chrono::milliseconds timeout,
                    const std::string& what) {
  auto signal = std::make_shared<std::pair<std::mutex, std::condition_variable>>();
  future->addCallback([signal](c10::ivalue::Future&) {
    std::lock_guard<std::mutex> lock(signal->first);
    signal->second.notify_all();
  });
  std::unique_lock<std::mutex> lock(signal->first);
  if (!signal->second.wait_for(lock, timeout, [&] { return future->completed(); })) {
    throw TimeoutError("ddp: " + what + " not complete after " + std::to_string(timeout.count()) +
                       " ms");
  }
  if (future->hasError()) std::rethrow_exception(future->exception_ptr());
  return future->value().toTensor();
}

}  // namespace ddp::detail
