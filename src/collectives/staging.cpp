#include "collectives/staging.h"

#include "collectives/copy_back.h"
#include "collectives/issue_order.h"
#include "collectives/staging_gate.h"

#include <ddp/errors.h>

#include <ATen/ATen.h>

#include <memory>
#include <utility>

namespace ddp::detail {

namespace {

// A blocking copy: it runs on the caller's current stream after what is
// already queued there (the tensor's producer) and returns when done.
std::vector<at::Tensor> blocking_copies(const std::vector<at::Tensor>& tensors,
                                        const c10::Device& device, bool copy) {
  std::vector<at::Tensor> staged;
  staged.reserve(tensors.size());
  for (const auto& t : tensors) {
    staged.push_back(
        at::empty(t.sizes(), t.options().device(device).pinned_memory(device.is_cpu())));
    if (copy) staged.back().copy_(t, /*non_blocking=*/false);
  }
  return staged;
}

Fence all_of(std::vector<Fence> fences) {
  return [fences = std::move(fences)] {
    for (const Fence& f : fences) {
      if (!f()) return false;
    }
    return true;
  };
}

// A Work that completes after `staged_work`, once each results[i] has been
// copied back into originals[i] by blocking copies on the completing thread.
WorkPtr copy_back_blocking(const WorkPtr& staged_work, std::vector<at::Tensor> originals,
                           std::vector<at::Tensor> results, std::chrono::milliseconds timeout) {
  auto work = std::make_shared<Work>(staged_work->context(), timeout, originals);
  // The callback holds staged_work until it has run (Work drops its callbacks then).
  staged_work->on_complete(
      [work, staged_work, originals = std::move(originals), results = std::move(results)]() {
        std::exception_ptr error = staged_work->exception();
        if (!error) {
          try {
            for (size_t i = 0; i < originals.size(); ++i) originals[i].copy_(results[i]);
          } catch (...) {
            error = std::current_exception();
          }
        }
        work->finish(error);
      });
  return work;
}

}  // namespace

WorkPtr StagingOrder::in_order(WorkPtr work, std::chrono::milliseconds timeout) {
  WorkPtr pending;
  {
    MutexLock lock(mutex_);
    if (last_deferred_ && last_deferred_->is_completed()) last_deferred_.reset();
    pending = last_deferred_;
  }
  if (!pending) return work;
  auto ordered = std::make_shared<Work>(work->context(), timeout, work->result());
  work->on_complete([work, pending, ordered] { finish_after(pending, ordered, work->exception()); });
  return ordered;
}

void StagingOrder::deferred(WorkPtr work) {
  MutexLock lock(mutex_);
  last_deferred_ = std::move(work);
}

Staging::Staging(c10::DeviceType tensors_device, const c10::Device& staging_device, bool gated,
                 std::chrono::milliseconds timeout)
    : stager_(staging_device.is_cpu() ? stager_for(tensors_device) : nullptr),
      staging_device_(staging_device),
      gated_(gated),
      timeout_(timeout) {}

std::vector<at::Tensor> Staging::in(const std::vector<at::Tensor>& tensors) {
  if (!stager_) return blocking_copies(tensors, staging_device_, /*copy=*/true);
  Fence copied;
  std::vector<at::Tensor> staged = stager_->to_host(tensors, /*copy=*/true, &copied);
  copied_.push_back(std::move(copied));
  return staged;
}

std::vector<at::Tensor> Staging::out(const std::vector<at::Tensor>& tensors) {
  if (!stager_) return blocking_copies(tensors, staging_device_, /*copy=*/false);
  Fence none;
  return stager_->to_host(tensors, /*copy=*/false, &none);
}

WorkPtr Staging::issue(const std::function<WorkPtr()>& call, std::vector<at::Tensor> originals,
                       std::vector<at::Tensor> results, ErrorContext error_context,
                       StagingOrder& order) {
  if (!stager_) {
    return order.in_order(copy_back_blocking(call(), std::move(originals), std::move(results),
                                             timeout_),
                          timeout_);
  }
  Fence copied = all_of(std::move(copied_));
  WorkPtr staged;
  if (gated_) {
    PendingGate gate(std::make_shared<StagingGate>(StagingGate{copied}));
    staged = call();
  } else {
    if (!wait_for_fence(copied, std::chrono::steady_clock::now() + timeout_)) {
      throw TimeoutError(std::move(error_context),
                         "the copy of its input to host memory (staging) did not finish within " +
                             std::to_string(timeout_.count()) + " ms: the device is stuck");
    }
    staged = call();
  }
  auto work = std::make_shared<Work>(staged->context(), timeout_, originals);
  staged->on_complete([staged, work, stager = stager_, copied, timeout = timeout_,
                       originals = std::move(originals), results = std::move(results)] {
    copy_back(CopyBack{work, staged->exception(), stager, copied, results, originals, timeout});
  });
  order.deferred(work);
  return work;
}

}  // namespace ddp::detail
