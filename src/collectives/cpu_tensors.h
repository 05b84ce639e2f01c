// The tensors the CPU backends (gloo, mpi, shm) take: on the CPU, or on a
// CUDA device (ProcessGroup stages those through pinned host memory, so a
// group that wraps one may pass them on), of one of the seven dtypes ddp's
// reduce kernels cover.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace ddp::detail {

// "" when `backend` can take `tensor`; else why not and what to do
// ("is on cuda:0; the gloo backend takes CPU tensors (move it with .cpu())").
std::string cpu_tensor_unsupported_reason(const at::Tensor& tensor, const std::string& backend);

}  // namespace ddp::detail
