// This rank's device, as launchers lay ranks out on a node: one GPU per local
// rank (ddprun, torchrun, mpirun and srun say which local rank this is).
#pragma once

#include <c10/core/Device.h>

namespace ddp {

// LOCAL_RANK's GPU (the launcher's local rank, see launch_info_from_env),
// modulo the GPUs this process sees, so that ranks share GPUs when a node
// has fewer GPUs than ranks (then use a backend that stages CUDA tensors,
// e.g. shm, not nccl); the CPU where libtorch sees no GPU.
//   auto device = ddp::local_device();
//   net->to(device);
c10::Device local_device();

}  // namespace ddp
