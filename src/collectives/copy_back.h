// The copy-back queue: completes the Works of staged operations
// (collectives/staging.h) on a thread of its own, so that neither the
// backend's worker nor the caller waits for a copy to the device. For each
// operation: once its input copies have passed (a backend may complete
// without reading its inputs), it queues the copies of the results back
// (Stager::to_device) at once, and when they have landed it completes the
// caller's Work. Copies are queued as soon as they can be; each group's
// Works complete in the order they were handed in, and a group's late copy
// holds no other group's. A copy back that fails or does not land within
// the timeout fails its Work and breaks its group (`broke`). The Works'
// callbacks run on this thread, one at a time.
//
// One per process, started on first use; its thread waits on a condition
// variable while nothing is in flight and is left running at exit.
#pragma once

#include <ddp/work.h>

#include "collectives/stager.h"

#include <ATen/core/Tensor.h>

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace ddp::detail {

struct CopyBack {
  WorkPtr work;              // the caller's
  std::exception_ptr error;  // the backend operation's; then nothing is copied
  Stager* stager = nullptr;
  Fence inputs_copied;
  std::vector<at::Tensor> results;    // on the host
  std::vector<at::Tensor> originals;  // on the device
  std::chrono::milliseconds timeout{0};  // for the copies, from the hand-in
  const void* group = nullptr;           // its group's Works complete in order
  std::function<void(const std::string&)> broke;  // called with why a copy back failed
};

// Hands `copy_back` in. Thread-safe; never blocks on a copy.
void copy_back(CopyBack copy_back);

}  // namespace ddp::detail
