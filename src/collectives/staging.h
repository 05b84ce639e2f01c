// Tensors on a device the backend does not move itself, staged through one it
// does: CUDA tensors over the CPU backends (shm, gloo, mpi) go through pinned
// host memory, so that a CUDA model trains over them and several ranks can
// share one GPU; CPU tensors over nccl go through its GPU, so that DDP's own
// small CPU collectives (the construction check, the iteration status) run
// on any backend.
//
// Where a stager serves the tensors' device (collectives/stager.h: CUDA
// tensors staged on the host) and the group reads its inputs on its queue's
// worker (ProcessGroup::reads_inputs_on_queue: shm, gloo, mpi), nobody waits
// for a copy on the way:
// - in: the copies to the host are queued after the work already queued on
//   the caller's current stream, and the caller's thread returns at once;
//   the worker waits for them before it reads the inputs
//   (collectives/staging_gate.h), and a late or failed copy breaks the
//   group's queue, so no later collective runs out of step with the peers.
// - out: when the backend's operation completes, the copy-back queue
//   (collectives/copy_back.h) queues the copies of the results to the device
//   on a stream of their own, and completes the caller's Work once they have
//   landed: the backend's worker goes on to the next operation meanwhile. A
//   late or failed copy back fails the Work and breaks the group
//   (StagingOrder): later operations fail without being issued.
// Elsewhere (CPU tensors over nccl; other groups; tensors of one operation
// on different device types; a build without CUDA), the copies block: in,
// on the caller's thread; out, on the thread that completes the backend's
// operation.
//
// Either way a finished Work means that the caller's tensors hold the
// result, whatever stream reads them next; and the group's Works still
// complete in issue order (StagingOrder).
#pragma once

#include <ddp/work.h>

#include "collectives/stager.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

namespace ddp::detail {

// One group's order of completion, and its copy-back failures. A Work
// completed by the copy-back queue may complete after a later operation's
// backend Work: while one is pending, in_order() hands out, in place of
// each later Work, one that completes after both. After a failed copy back
// the group is broken: refusal() says so for every later operation.
class StagingOrder {
 public:
  StagingOrder();
  // `work` as the caller gets it (issued from one thread: in issue order).
  WorkPtr in_order(WorkPtr work, std::chrono::milliseconds timeout);
  // Whether a copy back broke the group (cheap: one atomic load).
  bool broken() const;
  // A failed Work in `context`, saying why the group is broken.
  WorkPtr refusal(const ErrorContext& context) const;

 private:
  friend class Staging;
  struct State;
  std::shared_ptr<State> state_;  // shared with the copy-back queue's items
};

// The staging of one operation's tensors on `staging_device`.
class Staging {
 public:
  // `tensors_device`: where the operation's tensors are. `gated`: the group
  // reads its inputs on its queue's worker (ProcessGroup::reads_inputs_on_queue).
  Staging(c10::DeviceType tensors_device, const c10::Device& staging_device, bool gated,
          std::chrono::milliseconds timeout);

  // Blocking copies unless every one of `tensors` is on the device type
  // given to the constructor. Call before in() and out().
  void require_one_device(const std::vector<at::Tensor>& tensors);

  // Staged tensors for `tensors`: with their values (inputs), or to be
  // written (outputs only).
  std::vector<at::Tensor> in(const std::vector<at::Tensor>& tensors);
  std::vector<at::Tensor> out(const std::vector<at::Tensor>& tensors);
  at::Tensor in(const at::Tensor& tensor) { return in(std::vector<at::Tensor>{tensor})[0]; }
  at::Tensor out(const at::Tensor& tensor) { return out(std::vector<at::Tensor>{tensor})[0]; }

  // Runs `call` (the backend's operation on the staged tensors) and returns
  // the Work the caller gets: it completes once each results[i] has been
  // copied back into originals[i], with the operation's error if it failed,
  // or the copy's. Its result() is `originals`.
  WorkPtr issue(const std::function<WorkPtr()>& call, std::vector<at::Tensor> originals,
                std::vector<at::Tensor> results, StagingOrder& order);

 private:
  const c10::DeviceType tensors_device_;
  Stager* stager_;  // null: blocking copies
  const c10::Device staging_device_;
  const std::chrono::milliseconds timeout_;
  std::vector<Fence> copied_;  // the input copies queued by in()
};

}  // namespace ddp::detail
