// examples/train's --device: where a rank trains and over which backend,
// decided from what it sees (no CUDA call here, so that it is tested on any
// machine; train.cpp passes libtorch's GPU count).
#pragma once

#include <c10/core/Device.h>

#include <stdexcept>
#include <string>

namespace train {

struct DeviceChoice {
  bool cuda = false;
  int index = -1;       // the GPU's index with cuda
  std::string backend;  // for InitOptions::backend; "": $DDP_BACKEND, else auto
  std::string why;      // one line for the job's output
};

struct DeviceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `requested`: cpu, cuda or auto (train::parse checked it). `gpus`: the GPUs
// libtorch sees; `local_rank` of `local_ranks` on this host (the launcher's);
// `backend_env`: $DDP_BACKEND ("" when unset), which wins when set;
// `nccl_built`: this libddp has the nccl backend; `elastic`: --elastic, whose
// runner forms its groups over a backend that takes CPU tensors.
// - cpu, or auto without a GPU: the CPU.
// - cuda without a GPU: DeviceError, saying what to check.
// - a GPU per local rank: GPU local_rank over nccl (when built, and not
//   elastic); else over auto, which stages CUDA tensors through host memory.
// - fewer GPUs than local ranks: GPU local_rank % gpus, ranks sharing one
//   over auto (shm within the host), as NCCL before 2.30 refuses them.
inline DeviceChoice choose_device(const std::string& requested, int gpus, int local_rank,
                                  int local_ranks, const std::string& backend_env,
                                  bool nccl_built, bool elastic) {
  DeviceChoice c;
  if (requested == "cpu") {
    c.why = "cpu (--device cpu)";
    return c;
  }
  if (gpus <= 0) {
    if (requested == "cuda") {
      throw DeviceError(
          "--device cuda: libtorch sees no GPU in this process (check nvidia-smi, "
          "CUDA_VISIBLE_DEVICES, and that libtorch is a CUDA build); use --device cpu or auto");
    }
    c.why = "cpu (--device auto: libtorch sees no GPU)";
    return c;
  }
  c.cuda = true;
  c.index = local_rank % gpus;
  const std::string gpu = "cuda:" + std::to_string(c.index);
  const std::string counts = std::to_string(gpus) + " GPU(s) for " +
                             std::to_string(local_ranks) + " rank(s) on this host";
  if (!backend_env.empty()) {
    c.backend = backend_env;
    c.why = gpu + " (" + counts + "), backend " + backend_env + " (DDP_BACKEND)";
  } else if (gpus >= local_ranks && nccl_built && !elastic) {
    c.backend = "nccl";
    c.why = gpu + " (" + counts + ": one each), backend nccl";
  } else {
    c.why = gpu + " (" + counts + (gpus >= local_ranks ? ": one each" : ": shared") +
            "), backend auto, staging CUDA tensors through host memory (" +
            (elastic ? "--elastic forms its groups over shm or gloo unless DDP_BACKEND says"
             : gpus < local_ranks
                 ? "NCCL before 2.30 refuses ranks that share a GPU; DDP_BACKEND=nccl with "
                   "NCCL_MULTI_RANK_GPU_ENABLE=1 where NCCL is 2.30 or later"
                 : "this libddp has no nccl backend") +
            ")";
  }
  return c;
}

inline c10::Device device_of(const DeviceChoice& c) {
  return c.cuda ? c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(c.index))
                : c10::Device(c10::DeviceType::CPU);
}

}  // namespace train
