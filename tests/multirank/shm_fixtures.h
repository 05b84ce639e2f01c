// What the shm tests share (shm_test.cpp, shm_zero_copy_test.cpp,
// staging_test.cpp).
#pragma once

#include <ddp/backends/shm.h>
#include <ddp/distributed_data_parallel.h>

#include <torch/torch.h>

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace ddp::testing {

// A tiny ring: 4 KiB chunks, 2 slots, so that a few thousand elements
// already cross chunk, slice and slot-reuse boundaries.
inline ShmOptions tiny() {
  // No spinning: every wait blocks in futex, the path spinning hides.
  return ShmOptions().chunk_bytes(4096).slots(2).small_bytes(1024).spin_iterations(0).timeout(
      std::chrono::seconds(60));
}

inline ProcessGroupPtr shm_group(StorePtr store, int rank, int size, ShmOptions o = tiny()) {
  return std::make_shared<ShmProcessGroup>(std::move(store), rank, size, o);
}

// This process's segments in /dev/shm (rank 0 of a thread-ranked group is
// this process, and the names it creates carry its pid).
inline int own_segments() {
  const std::string prefix = "ddp-shm-" + std::to_string(getpid()) + "-";
  int count = 0;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) count += std::string(e->d_name).rfind(prefix, 0) == 0;
    closedir(d);
  }
  return count;
}

// The float64 MLP (16-64-64-1) that DDP trains in these tests, its values
// drawn from libtorch's global generator seeded `seed` (make it on the test
// thread: the rank threads share that generator).
inline torch::nn::Sequential small_mlp(uint64_t seed) {
  torch::manual_seed(seed);
  torch::nn::Sequential net(torch::nn::Linear(16, 64), torch::nn::Tanh(),
                            torch::nn::Linear(64, 64), torch::nn::Tanh(),
                            torch::nn::Linear(64, 1));
  net->to(torch::kDouble);
  return net;
}

// `steps` steps of SGD with momentum on a copy of `initial` wrapped by DDP
// with `options` (its process group set), on this rank's own data (a
// generator seeded 7 + rank): the parameters after each step, flattened.
inline std::vector<at::Tensor> ddp_steps(const torch::nn::Sequential& initial,
                                         DistributedDataParallelOptions options, int rank,
                                         int steps) {
  torch::nn::Sequential net(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(initial->clone()));
  DistributedDataParallel model(net, options);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7 + rank);
  std::vector<at::Tensor> after;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    at::Tensor x = at::randn({8, 16}, gen, at::kDouble);
    torch::mse_loss(model->forward(x), x.sum(1, true)).backward();
    opt.step();
    after.push_back(torch::nn::utils::parameters_to_vector(model->parameters()).detach());
  }
  return after;
}

}  // namespace ddp::testing
