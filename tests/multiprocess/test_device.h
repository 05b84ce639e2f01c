// The device a test program runs on, from its --device argument: "cpu", or
// "cuda" for this rank's GPU (ddp::local_device(): ranks share one GPU when
// there are fewer GPUs than ranks).
#pragma once

#include <ddp/device.h>

#include <torch/types.h>

#include <cstdlib>
#include <iostream>
#include <string>

namespace ddp::testing {

inline torch::Device test_device(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  const torch::Device device = ddp::local_device();
  if (name != "cuda" || !device.is_cuda()) {
    // The gpu tests run through tests/gpu/skip_without_gpu.sh, which skips
    // them where there is no GPU: reaching here is a mistake.
    std::cerr << "--device " << name << ": expected cpu, or cuda with a GPU visible" << std::endl;
    std::exit(2);
  }
  return device;
}

}  // namespace ddp::testing
