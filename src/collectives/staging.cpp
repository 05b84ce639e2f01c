#include "collectives/staging.h"

#include "base/mutex.h"
#include "collectives/copy_back.h"
#include "collectives/issue_order.h"
#include "collectives/staging_gate.h"
#include "flight/recorder.h"

#include <ddp/errors.h>

#include <ATen/ATen.h>

#include <atomic>
#include <memory>
#include <string>
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

struct StagingOrder::State {
  Mutex mutex;
  WorkPtr last_deferred DDP_GUARDED_BY(mutex);  // null once seen complete
  std::string broken DDP_GUARDED_BY(mutex);     // a copy back's failure; "" while none
  std::atomic<bool> is_broken{false};
};

StagingOrder::StagingOrder() : state_(std::make_shared<State>()) {}

WorkPtr StagingOrder::in_order(WorkPtr work, std::chrono::milliseconds timeout) {
  WorkPtr pending;
  {
    MutexLock lock(state_->mutex);
    if (state_->last_deferred && state_->last_deferred->is_completed()) {
      state_->last_deferred.reset();
    }
    pending = state_->last_deferred;
  }
  if (!pending) return work;
  WorkPtr ordered;
  {
    // Not the flight recorder's record of this operation, if the backend's
    // Work left it: the caller's Work carries it (process_group.cpp).
    flight::PendingRecord none(0);
    ordered = std::make_shared<Work>(work->context(), timeout, work->result());
  }
  work->on_complete([work, pending, ordered] { finish_after(pending, ordered, work->exception()); });
  return ordered;
}

bool StagingOrder::broken() const { return state_->is_broken.load(std::memory_order_acquire); }

WorkPtr StagingOrder::refusal(const ErrorContext& context) const {
  std::string broken;
  {
    MutexLock lock(state_->mutex);
    broken = state_->broken;
  }
  flight::PendingRecord none(0);
  auto work = std::make_shared<Work>(context, std::chrono::milliseconds(1));
  work->finish(std::make_exception_ptr(CommunicationError(
      context, "not run: the group is broken by an earlier failure: " + broken)));
  return work;
}

Staging::Staging(c10::DeviceType tensors_device, const c10::Device& staging_device, bool gated,
                 std::chrono::milliseconds timeout)
    : tensors_device_(tensors_device),
      stager_(staging_device.is_cpu() && gated ? stager_for(tensors_device) : nullptr),
      staging_device_(staging_device),
      timeout_(timeout) {}

void Staging::require_one_device(const std::vector<at::Tensor>& tensors) {
  for (const at::Tensor& t : tensors) {
    if (t.device().type() != tensors_device_) stager_ = nullptr;
  }
}

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
                       std::vector<at::Tensor> results, StagingOrder& order) {
  if (!stager_) {
    return order.in_order(copy_back_blocking(call(), std::move(originals), std::move(results),
                                             timeout_),
                          timeout_);
  }
  Fence copied = all_of(std::move(copied_));
  WorkPtr staged;
  {
    PendingGate gate(std::make_shared<StagingGate>(StagingGate{copied}));
    staged = call();
    if (!gate.taken()) {
      // The backend ran it without its queue, which it must not when it
      // says it reads on its queue: the inputs may not have been copied.
      staged = std::make_shared<Work>(staged->context(), timeout_);
      staged->finish(std::make_exception_ptr(InvalidArgument(
          staged->context(), "the backend did not queue a staged operation (its "
                             "reads_inputs_on_queue() is wrong): its inputs were not waited for")));
    }
  }
  auto work = std::make_shared<Work>(staged->context(), timeout_, originals);
  std::shared_ptr<StagingOrder::State> state = order.state_;
  {
    MutexLock lock(state->mutex);
    state->last_deferred = work;
  }
  auto broke = [state](const std::string& why) {
    MutexLock lock(state->mutex);
    if (state->broken.empty()) state->broken = why;
    state->is_broken.store(true, std::memory_order_release);
  };
  staged->on_complete([staged, work, stager = stager_, copied, timeout = timeout_, broke,
                       group = state.get(), originals = std::move(originals),
                       results = std::move(results)] {
    copy_back(CopyBack{work, staged->exception(), stager, copied, results, originals, timeout,
                       group, broke});
  });
  return work;
}

}  // namespace ddp::detail
