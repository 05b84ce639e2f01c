// The Reducer's copy of a gradient into its bucket slice, averaged on the
// way: dst = src / divisor.
#pragma once

#include <ATen/core/Tensor.h>

namespace ddp::detail {

// Writes src / divisor into dst (same shape; divisor a 0-dim tensor, as
// at::div_out takes it). Contiguous, non-overlapping float and double CPU
// tensors of at least kStreamedCopyBytes, on a CPU with AVX2, take a loop
// of true divisions (bit-identical to at::div_out; over libtorch's
// intra-op threads as at::div_out) whose stores bypass the caches:
// a bucket is all-reduced from memory anyway, and the copy neither reads
// the destination's lines first nor evicts the backward pass's working set.
// Measured on the MLP's 64 MiB of gradients, one thread: about 2.2x
// faster than at::div_out (docs/experiments/training-one-host.md, "The
// averaging copy past the caches").
// Everything else is at::div_out.
void copy_divided(at::Tensor& dst, const at::Tensor& src, const at::Tensor& divisor);

// Whether copy_divided takes the streamed loop for these tensors.
bool copy_divided_streams(const at::Tensor& dst, const at::Tensor& src);

// Below this many bytes a copy keeps its stores in the caches, where the
// all-reduce that follows can find them.
constexpr int64_t kStreamedCopyBytes = 256 << 10;

}  // namespace ddp::detail
