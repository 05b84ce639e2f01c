// ddp_torch::Work: one of ddp's Works (ddp/work.h) as PyTorch's c10d::Work,
// so that torch.distributed can wait on it and chain futures from it (DDP's
// comm hooks call get_future()).
//
// Contract
// - wait(timeout) waits at most `timeout`, else the collective's own timeout
//   (its options'), else the group's; a failure is rethrown as PyTorch's
//   exception type (errors.h), carrying ddp's message.
// - getFuture() completes with the result tensors, or with the failure, on
//   a completion thread (completions.h), where its callbacks run; wait()
//   returns once it has, and isCompleted() is true only then.
#pragma once

#include <ddp/work.h>

#include "base/mutex.h"

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <memory>
#include <vector>

namespace ddp_torch {

class Work : public c10d::Work {
 public:
  // `timeout`: wait()'s default (the collective's options', else the
  // group's).
  Work(ddp::WorkPtr work, int rank, c10d::OpType type, std::chrono::milliseconds timeout,
       std::vector<at::Tensor> results);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  // Set once the future is complete (its callbacks ran): wait() blocks on it.
  struct FutureDone {
    ddp::Mutex mutex;
    ddp::CondVar cv;
    bool done DDP_GUARDED_BY(mutex) = false;
  };

  const ddp::WorkPtr work_;
  const std::chrono::milliseconds timeout_;
  const std::vector<at::Tensor> results_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
  const std::shared_ptr<FutureDone> future_done_ = std::make_shared<FutureDone>();
};

}  // namespace ddp_torch
