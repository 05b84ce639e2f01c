// Work: the handle of one asynchronous collective (paper §3.3).
//
// Contract
// - A Work completes exactly once, with success or with an exception; the
//   exception is rethrown by wait() on every call.
// - wait(timeout) blocks at most `timeout` (default: the timeout of the group
//   that issued it); a Work still running then raises TimeoutError naming the
//   operation. It never blocks forever.
// - Callbacks added with on_complete() run exactly once, in the order they
//   were added, on the thread that completes the Work (a backend worker), or
//   at once on the caller's thread once that thread has run them all.
//   wait() returns only after every callback added before then has run. Keep them short; they must
//   not throw, nor wait() on the Work they belong to.
// - Thread-safe: any thread may wait, poll, or add callbacks.
#pragma once

#include <ATen/core/Tensor.h>

#include <ddp/errors.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ddp {

class Work {
 public:
  // `context` is the issuing group's (ProcessGroup::error_context) with the
  // operation named, e.g. "allreduce #12 (SUM, Float, 4096 elements)": the
  // errors about this Work carry it.
  Work(ErrorContext context, std::chrono::milliseconds default_timeout,
       std::vector<at::Tensor> outputs = {});
  // A Work known by a description alone (a custom backend's): its errors'
  // context has the description as its operation.
  Work(std::string description, std::chrono::milliseconds default_timeout,
       std::vector<at::Tensor> outputs = {});
  ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until complete; rethrows the operation's error. TimeoutError when
  // not complete within `timeout` (a negative value means the default).
  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1));
  bool is_completed() const;
  bool is_success() const;               // completed without error
  std::exception_ptr exception() const;  // null while running or on success
  // When it completed (steady clock); meaningful once is_completed().
  std::chrono::steady_clock::time_point completion_time() const;
  // The tensors the operation wrote (in-place inputs or outputs).
  const std::vector<at::Tensor>& result() const { return outputs_; }
  // "allreduce #12 (SUM, Float, 4096 elements) on rank 1 of 2 [gloo]".
  const std::string& description() const { return description_; }
  // The context of the errors about this Work (ddp/errors.h).
  const ErrorContext& context() const { return context_; }

  void on_complete(std::function<void()> callback);

  // For backends: the operation has begun (a worker took it up, or its
  // kernel was queued). Optional: it sets the started state and time that
  // the flight recorder (flight_recorder.h) shows.
  void mark_started();
  // For backends: complete the Work (once; later calls are ignored).
  void finish(std::exception_ptr error = nullptr);

  // A Work that is already complete (for no-op collectives).
  static std::shared_ptr<Work> completed(std::string description,
                                         std::vector<at::Tensor> outputs = {});

 private:
  const ErrorContext context_;
  const std::string description_;
  const std::chrono::milliseconds default_timeout_;
  const std::vector<at::Tensor> outputs_;

  // Whether and how it completed, the callbacks still to run, and the lock
  // and condition variable around them (work.cpp).
  struct Completion;
  const std::unique_ptr<Completion> completion_;
  // The flight recorder's record of this Work's collective, 0 for none:
  // the first Work made on the thread of a recording group's collective
  // takes it (src/flight/recorder.h, PendingRecord).
  const uint64_t flight_record_;
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace ddp
