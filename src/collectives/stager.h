// Where the copies of a staged collective run (collectives/staging.h): the
// seam between the staging's order and timing, which are the same for any
// device, and a device's copy engines. The CUDA stager (stager_cuda.cpp) puts
// the copies to pinned host memory on a stream of its own, ordered after the
// caller's current stream, and the copies back on another: neither the
// caller's thread nor the backend's worker waits for a copy, only for its
// fence. Tests put in a stager of their own for CPU tensors (staging_test).
#pragma once

#include "collectives/fence.h"

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include <vector>

namespace ddp::detail {

class Stager {
 public:
  virtual ~Stager() = default;

  // Host tensors shaped like `tensors` (pinned), and for `copy` the copies of
  // their values queued after the work already queued on the caller's
  // current stream. `*copied` passes once those copies are done (at once
  // when nothing was queued). The tensors stay alive until it passes.
  virtual std::vector<at::Tensor> to_host(const std::vector<at::Tensor>& tensors, bool copy,
                                          Fence* copied) = 0;
  // Queues the copy of each results[i] (host) into originals[i] (device);
  // the returned fence passes once they are done. Both stay alive until it
  // passes.
  virtual Fence to_device(const std::vector<at::Tensor>& results,
                          const std::vector<at::Tensor>& originals) = 0;
};

// The stager for tensors on devices of `type`: the test's while one is put
// in (StagerForTesting), else this build's (CUDA where libtorch has it);
// null where there is none, and staging then copies on the caller's thread.
Stager* stager_for(c10::DeviceType type);

// While one lives, stager_for(type) is `stager`. Tests only.
class StagerForTesting {
 public:
  StagerForTesting(c10::DeviceType type, Stager* stager);
  ~StagerForTesting();
  StagerForTesting(const StagerForTesting&) = delete;
  StagerForTesting& operator=(const StagerForTesting&) = delete;

 private:
  const c10::DeviceType type_;
  Stager* const previous_;
};

// This build's stager for `type`: stager_cuda.cpp or stager_none.cpp.
Stager* device_stager(c10::DeviceType type);

}  // namespace ddp::detail
