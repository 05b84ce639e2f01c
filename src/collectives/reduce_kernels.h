// Element-wise reduction kernels, c[i] = a[i] op b[i], for every supported
// dtype and ReduceOp, in the signature Gloo's algorithms call.
// AVG reduces as SUM; the caller divides afterwards.
#pragma once

#include <ddp/process_group.h>

#include <c10/core/ScalarType.h>

#include <cstddef>

namespace ddp::detail {

using ReduceKernel = void (*)(void* c, const void* a, const void* b, size_t n);

ReduceKernel reduce_kernel(at::ScalarType dtype, ReduceOp op);

}  // namespace ddp::detail
