// The dtypes ddp's collectives take, on every backend: the seven that the
// reduce kernels (reduce_kernels.cpp) and NCCL both cover.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

namespace ddp::detail {

inline bool is_collective_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kInt:
    case at::kLong:
    case at::kByte:
      return true;
    default:
      return false;
  }
}

// "" for a collective dtype; else why not, naming `backend` and the dtypes
// it takes.
inline std::string dtype_unsupported_reason(at::ScalarType dtype, const std::string& backend) {
  if (is_collective_dtype(dtype)) return "";
  return "has dtype " + std::string(c10::toString(dtype)) + "; the " + backend +
         " backend takes Float, Double, Half, BFloat16, Int, Long, Byte";
}

}  // namespace ddp::detail
