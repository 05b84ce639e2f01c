// Whether two lists of tensors are the same bit for bit (torch::equal on
// each pair: the same sizes, dtype and values), as the exactness tests
// compare parameters.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace ddp::testing {

inline bool bitwise_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!at::equal(a[i], b[i])) return false;
  }
  return true;
}

}  // namespace ddp::testing
