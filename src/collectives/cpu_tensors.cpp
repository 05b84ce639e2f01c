#include "collectives/cpu_tensors.h"

#include "collectives/dtypes.h"

#include <c10/core/ScalarType.h>

namespace ddp::detail {

std::string cpu_tensor_unsupported_reason(const at::Tensor& t, const std::string& backend) {
  if (!t.device().is_cpu() && !t.device().is_cuda()) {
    return "is on " + t.device().str() + "; the " + backend +
           " backend takes CPU tensors, and CUDA tensors through pinned host memory "
           "(move it with .cpu())";
  }
  return dtype_unsupported_reason(t.scalar_type(), backend);
}

}  // namespace ddp::detail
