#include "work.h"

#include "completions.h"
#include "errors.h"

#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <c10/util/Exception.h>

#include <utility>

namespace ddp_torch {

Work::Work(ddp::WorkPtr work, int rank, c10d::OpType type, std::chrono::milliseconds timeout,
           std::vector<at::Tensor> results)
    : c10d::Work(rank, type),
      work_(std::move(work)),
      timeout_(timeout),
      results_(std::move(results)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {
  // Completed on a thread of its own (completions.h). The callback lives in
  // ddp's Work: it holds that Work weakly (a strong reference would be a
  // cycle) and no reference to this one.
  work_->on_complete([future = future_, done = future_done_,
                      weak = std::weak_ptr<ddp::Work>(work_), results = results_] {
    const ddp::WorkPtr work = weak.lock();  // held by whoever completes it
    std::exception_ptr error = work ? work->exception() : nullptr;
    Completions::instance().post([future, done, error, results] {
      if (error) {
        future->setError(as_torch_error(error));
      } else {
        future->markCompleted(c10::IValue(results));
      }
      ddp::MutexLock lock(done->mutex);
      done->done = true;
      done->cv.notify_all();
    });
  });
}

bool Work::isCompleted() { return work_->is_completed() && future_->completed(); }

bool Work::isSuccess() const { return work_->is_success() && future_->completed(); }

std::exception_ptr Work::exception() const {
  std::exception_ptr error = work_->exception();
  return error ? as_torch_error(error) : nullptr;
}

std::vector<at::Tensor> Work::result() { return results_; }

bool Work::wait(std::chrono::milliseconds timeout) {
  if (timeout == kNoTimeout) timeout = timeout_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  translating_errors([&] { work_->wait(timeout); });
  // The future is being completed on a completion thread: wait for it too
  // (within the same deadline), so that get_future() is complete when this
  // returns.
  ddp::MutexLock lock(future_done_->mutex);
  const bool done = future_done_->cv.wait_until(
      future_done_->mutex, deadline,
      [this]() DDP_REQUIRES(future_done_->mutex) { return future_done_->done; });
  if (!done) {
    C10_THROW_ERROR(DistBackendError,
                    "ddp: " + work_->description() +
                        ": completed, but its future's callbacks did not finish within " +
                        std::to_string(timeout.count()) +
                        " ms (a callback that waits for a collective that never comes?)");
  }
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> Work::getFuture() { return future_; }

}  // namespace ddp_torch
