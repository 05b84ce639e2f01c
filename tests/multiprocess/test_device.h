// The device a test program runs on, from its --device argument: "cpu", or
// "cuda" for this rank's GPU (ddp::local_device(): ranks share one GPU when
// there are fewer GPUs than ranks); and the start such a program shares.
#pragma once

#include <ddp/device.h>
#include <ddp/init.h>

#include <ATen/Parallel.h>
#include <torch/types.h>

#include <chrono>
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

// What a test program run by a launcher starts with: one intra-op thread
// (its ranks share the cores), its device ("--device NAME" where it opens
// the command line, else the CPU), and the default group from the
// launcher's environment with a 60 s timeout on every collective.
struct TestRank {
  torch::Device device;
  ProcessGroupPtr group;
};
inline TestRank start_test_rank(int argc, char** argv) {
  at::set_num_threads(1);
  const torch::Device device =
      test_device(argc > 2 && std::string(argv[1]) == "--device" ? argv[2] : "cpu");
  return {device, init_process_group(InitOptions().timeout(std::chrono::seconds(60)))};
}

}  // namespace ddp::testing
