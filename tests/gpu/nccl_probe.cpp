// Exits 0 when RANKS ranks can run the nccl backend here: a GPU each, or
// fewer GPUs that the loaded NCCL lets ranks share (2.30 and later with
// NCCL_MULTI_RANK_GPU_ENABLE=1); else 1, printing why (skip_without_gpu.sh
// --nccl-ranks). Prints the NCCL this process loaded and where from.
//   nccl_probe RANKS
#include "collectives/nccl/communicator.h"
#include "collectives/nccl/version_gate.h"

#include <torch/cuda.h>

#include <cstdlib>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  namespace nccl = ddp::detail::nccl;
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 1;
  const int gpus = static_cast<int>(torch::cuda::device_count());
  std::cout << "nccl_probe: NCCL " << nccl::version() << " (" << nccl::loaded_path() << "), "
            << gpus << " GPU(s) for " << ranks << " rank(s)" << std::endl;
  if (gpus == 0) return 1;
  if (gpus >= ranks) return 0;
  const std::string refusal =
      nccl::shared_gpu_refusal(nccl::loaded_version_code(), std::getenv(nccl::kMultiRankGpuVariable));
  if (!refusal.empty()) std::cout << "nccl_probe: " << refusal << std::endl;
  return refusal.empty() ? 0 : 1;
}
