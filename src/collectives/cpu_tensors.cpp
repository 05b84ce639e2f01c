#include "collectives/cpu_tensors.h"

#include <c10/core/ScalarType.h>

namespace ddp::detail {

std::string cpu_tensor_unsupported_reason(const at::Tensor& t, const std::string& backend) {
  if (!t.device().is_cpu()) {
    return "is on " + t.device().str() + "; the " + backend +
           " backend takes CPU tensors (move it with .cpu())";
  }
  switch (t.scalar_type()) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kInt:
    case at::kLong:
    case at::kByte:
      return "";
    default:
      return "has dtype " + std::string(c10::toString(t.scalar_type())) + "; the " + backend +
             " backend takes Float, Double, Half, BFloat16, Int, Long, Byte";
  }
}

}  // namespace ddp::detail
