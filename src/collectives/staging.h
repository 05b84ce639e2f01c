// Tensors on a device the backend does not move itself, staged through one it
// does: CUDA tensors over the CPU backends (shm, gloo, mpi) go through pinned
// host memory, so that a CUDA model trains over them and several ranks can
// share one GPU; CPU tensors over nccl go through its GPU, so that DDP's own
// small CPU collectives (the construction check, the iteration status) run
// on any backend.
//
// A staged collective, on the caller's thread: copies each input to the
// staging device (a copy ordered after the work already queued on the
// caller's current stream, and waited for), and issues the backend's
// collective on the copies. When that completes, the results are copied back
// (waited for on the completing thread) before the returned Work completes:
// a finished Work means the caller's tensors hold the result, whatever
// stream reads them next.
#pragma once

#include <ddp/work.h>

#include <ATen/core/Tensor.h>

#include <vector>

namespace ddp::detail {

// A tensor shaped like `tensor` on `device` (pinned when that is the CPU);
// holds its values when `copy`.
at::Tensor staged_copy(const at::Tensor& tensor, const c10::Device& device, bool copy);

// staged_copy of each of `tensors`.
std::vector<at::Tensor> staged_copies(const std::vector<at::Tensor>& tensors,
                                      const c10::Device& device, bool copy);

// A Work that completes after `staged_work`, once each results[i] has been
// copied back into originals[i]; with staged_work's error if it failed, or
// the copy's. Its result() is `originals`.
WorkPtr copy_back_on_completion(const WorkPtr& staged_work, std::vector<at::Tensor> originals,
                                std::vector<at::Tensor> results, std::chrono::milliseconds timeout);

}  // namespace ddp::detail
