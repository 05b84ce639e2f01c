// Completing Works in issue order without blocking a thread: a Work whose
// operation is done completes only once the Work issued before it has
// (a callback chain on the previous Work). Every backend and composite
// group that may finish operations out of order uses this.
#pragma once

#include <ddp/work.h>

#include <exception>
#include <functional>

namespace ddp::detail {

// Runs `fn` once `previous` has completed; at once when there is none.
inline void after(const WorkPtr& previous, std::function<void()> fn) {
  if (previous) {
    previous->on_complete(std::move(fn));
  } else {
    fn();
  }
}

// Completes `work` with `error` once `previous` has completed.
inline void finish_after(const WorkPtr& previous, WorkPtr work, std::exception_ptr error) {
  after(previous, [work = std::move(work), error] { work->finish(error); });
}

}  // namespace ddp::detail
