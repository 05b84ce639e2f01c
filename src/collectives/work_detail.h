// How a Work's description names its operation's arguments, the same in
// every backend: "SUM, Float, 4096 elements", "SUM, 3 tensors of Float".
#pragma once

#include <ddp/process_group.h>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

namespace ddp::detail {

// "<op>, <dtype>, <n> elements" (without the op when `op` is null).
inline std::string tensor_detail(const at::Tensor& t, const char* op = nullptr) {
  std::string s = op ? std::string(op) + ", " : "";
  return s + c10::toString(t.scalar_type()) + ", " + std::to_string(t.numel()) + " elements";
}

// "<op>, <k> tensors of <dtype>": a coalesced allreduce.
inline std::string coalesced_detail(const std::vector<at::Tensor>& tensors, ReduceOp op) {
  return std::string(to_string(op)) + ", " + std::to_string(tensors.size()) + " tensors of " +
         c10::toString(tensors[0].scalar_type());
}

}  // namespace ddp::detail
