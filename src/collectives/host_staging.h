// CUDA tensors over the CPU backends (shm, gloo, mpi): staged through pinned
// host memory, so that a CUDA model trains over them too and several ranks
// can share one GPU.
//
// What a staged collective does, on the caller's thread: copies each input
// to a pinned host tensor (ordered after the work already queued on the
// caller's current stream, which the copy waits for), and issues the
// backend's collective on the host copies. When that completes, the results
// are copied back to the device (waited for on the completing thread) before
// the returned Work completes: a finished Work means the device tensors hold
// the result, whatever stream reads them next.
#pragma once

#include <ddp/work.h>

#include <ATen/core/Tensor.h>

#include <vector>

namespace ddp::detail {

// A pinned host tensor shaped like `tensor`; holds its values when `copy`.
at::Tensor host_copy(const at::Tensor& tensor, bool copy);

// Pinned host copies of `tensors` (see host_copy).
std::vector<at::Tensor> host_copies(const std::vector<at::Tensor>& tensors, bool copy);

// A Work that completes after `host_work`, once each results[i] has been
// copied back into devices[i]; with host_work's error if it failed, or the
// copy's. Its result() is `devices`.
WorkPtr copy_back_on_completion(const WorkPtr& host_work, std::vector<at::Tensor> devices,
                                std::vector<at::Tensor> results,
                                std::chrono::milliseconds timeout);

}  // namespace ddp::detail
