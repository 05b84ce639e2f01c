// Gradient bucketing (paper §3.2.3): which parameters are reduced together.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ddp {

// Groups tensors into buckets, visiting them in `order` (indices into
// `tensors`). Tensors of different (dtype, device) never share a bucket. The
// first bucket of each (dtype, device) closes once it holds at least
// `first_cap_bytes`, later ones at `cap_bytes`; a tensor larger than the cap
// gets a bucket of its own. A cap of 0 puts every tensor alone.
// Returns buckets ordered by the position in `order` of their first tensor;
// each lists its tensors in visiting order.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<at::Tensor>& tensors,
                                                const std::vector<size_t>& order,
                                                int64_t first_cap_bytes, int64_t cap_bytes);
// The same with a cap per bucket: the k-th bucket of each (dtype, device)
// closes at caps_bytes[k], the last cap repeating (PyTorch's
// bucket_size_limits); {first, cap} is the form above. Non-empty.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<at::Tensor>& tensors,
                                                const std::vector<size_t>& order,
                                                const std::vector<int64_t>& caps_bytes);

// The default visiting order: reverse of the given (parameters()) order, the
// order in which backward usually produces gradients.
std::vector<size_t> reverse_order(size_t count);

}  // namespace ddp
