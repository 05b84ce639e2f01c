// Tensors on a device the backend does not move itself, staged through one it
// does: CUDA tensors over the CPU backends (shm, gloo, mpi) go through pinned
// host memory, so that a CUDA model trains over them and several ranks can
// share one GPU; CPU tensors over nccl go through its GPU, so that DDP's own
// small CPU collectives (the construction check, the iteration status) run
// on any backend.
//
// Where a stager serves the tensors' device (collectives/stager.h: CUDA
// tensors staged on the host), nobody waits for a copy on the way:
// - in: the copies to the host are queued after the work already queued on
//   the caller's current stream, and the caller's thread returns at once. A
//   group that reads its inputs on its queue's worker (shm, gloo, mpi) waits
//   for them there (collectives/staging_gate.h); any other group, on the
//   caller's thread before the backend call.
// - out: when the backend's operation completes, the copy-back queue
//   (collectives/copy_back.h) queues the copies of the results to the device
//   on a stream of their own, and completes the caller's Work once they have
//   landed: the backend's worker goes on to the next operation meanwhile.
// Elsewhere (CPU tensors over nccl; a build without CUDA), the copies are
// blocking: in, on the caller's thread; out, on the thread that completes
// the backend's operation.
//
// Either way a finished Work means that the caller's tensors hold the
// result, whatever stream reads them next; and the group's Works still
// complete in issue order (StagingOrder).
#pragma once

#include <ddp/work.h>

#include "base/mutex.h"
#include "collectives/stager.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <functional>
#include <vector>

namespace ddp::detail {

// One group's order of completion: a Work completed by the copy-back queue
// may complete after a later operation's backend Work. While one is
// pending, in_order() hands out, in place of each later Work, one that
// completes after both.
class StagingOrder {
 public:
  // `work` as the caller gets it.
  WorkPtr in_order(WorkPtr work, std::chrono::milliseconds timeout);
  // `work` completes through the copy-back queue.
  void deferred(WorkPtr work);

 private:
  Mutex mutex_;
  WorkPtr last_deferred_ DDP_GUARDED_BY(mutex_);  // null once seen complete
};

// The staging of one operation's tensors on `staging_device`.
class Staging {
 public:
  // `tensors_device`: where the operation's tensors are. `gated`: the group
  // reads its inputs on its queue's worker (ProcessGroup::reads_inputs_on_queue).
  Staging(c10::DeviceType tensors_device, const c10::Device& staging_device, bool gated,
          std::chrono::milliseconds timeout);

  // Staged tensors for `tensors`: with their values (inputs), or to be
  // written (outputs only).
  std::vector<at::Tensor> in(const std::vector<at::Tensor>& tensors);
  std::vector<at::Tensor> out(const std::vector<at::Tensor>& tensors);
  at::Tensor in(const at::Tensor& tensor) { return in(std::vector<at::Tensor>{tensor})[0]; }
  at::Tensor out(const at::Tensor& tensor) { return out(std::vector<at::Tensor>{tensor})[0]; }

  // Runs `call` (the backend's operation on the staged tensors) once the
  // input copies may be read, and returns the Work the caller gets: it
  // completes once each results[i] has been copied back into originals[i],
  // with the operation's error if it failed, or the copy's. Its result() is
  // `originals`; `error_context` its errors' context (the group's).
  WorkPtr issue(const std::function<WorkPtr()>& call, std::vector<at::Tensor> originals,
                std::vector<at::Tensor> results, ErrorContext error_context, StagingOrder& order);

 private:
  Stager* const stager_;  // null: blocking copies
  const c10::Device staging_device_;
  const bool gated_;
  const std::chrono::milliseconds timeout_;
  std::vector<Fence> copied_;  // the input copies queued by in()
};

}  // namespace ddp::detail
