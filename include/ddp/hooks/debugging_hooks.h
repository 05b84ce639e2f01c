// Debugging communication hooks (PyTorch's documentation, "DDP
// Communication Hooks": "Debugging Communication Hooks"). They do not produce correct gradients.
#pragma once

#include <ddp/comm_hook.h>

namespace ddp {

// No communication: returns the bucket as it is (this rank's gradients).
// For headroom analysis: if training is not much faster with it, allreduce
// is not the bottleneck. The state is ignored.
FuturePtr noop_hook(const ProcessGroupPtr& ignored, GradBucket& bucket);

}  // namespace ddp
