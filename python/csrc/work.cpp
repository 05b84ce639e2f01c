#include "work.h"

#include "completions.h"
#include "errors.h"

#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>

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
  // Completed on a thread of its own (completions.h). The callback holds
  // no reference to this Work: only to what the future completes with.
  work_->on_complete([future = future_, work = work_.get(), results = results_] {
    std::exception_ptr error = work->exception();
    Completions::instance().post([future, error, results] {
      if (error) {
        future->setError(as_torch_error(error));
      } else {
        future->markCompleted(c10::IValue(results));
      }
    });
  });
}

bool Work::isCompleted() { return work_->is_completed(); }

bool Work::isSuccess() const { return work_->is_success(); }

std::exception_ptr Work::exception() const {
  std::exception_ptr error = work_->exception();
  return error ? as_torch_error(error) : nullptr;
}

std::vector<at::Tensor> Work::result() { return results_; }

bool Work::wait(std::chrono::milliseconds timeout) {
  if (timeout == kNoTimeout) timeout = timeout_;  // kUnsetTimeout: the group's
  translating_errors([&] { work_->wait(timeout); });
  future_->wait();  // so that get_future() is complete too (it is being completed)
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> Work::getFuture() { return future_; }

}  // namespace ddp_torch
