// A copy running on a device, seen from the host: polled, never blocked on,
// so that whoever waits for it keeps its own deadline.
#pragma once

#include <chrono>
#include <functional>

namespace ddp::detail {

// True once the copies it stands for have finished; throws the device's
// error if they failed. Cheap (cudaEventQuery); callable from any thread.
using Fence = std::function<bool()>;

// Polls `fence` until it passes (true) or `deadline` is past (false): it
// yields between polls for the first 200 µs (a bucket's copy takes tens of
// microseconds), then sleeps 20 µs between them. Rethrows the fence's error.
bool wait_for_fence(const Fence& fence, std::chrono::steady_clock::time_point deadline);

}  // namespace ddp::detail
