// The large all-reduce of the shm backend: reduce-scatter then all-gather
// through the slots, chunk by chunk, with the chunks' phases scheduled out of
// lockstep (see pipeline.cpp).
#pragma once

#include "collectives/reduce_kernels.h"
#include "collectives/shm/channel.h"

#include <cstddef>
#include <cstdint>

namespace ddp::detail::shm {

// All-reduces the `n` elements of `element_size` bytes at `data` in place.
void allreduce_pipelined(Channel& ch, char* data, int64_t n, size_t element_size,
                         ReduceKernel kernel);

}  // namespace ddp::detail::shm
