// A short DDP job for the timeline test (timeline_test.sh): ddprun
// --nproc-per-node 2 timeline_job [--hook] [--iterations N], run with
// DDP_TIMELINE set. A small MLP with a BatchNorm (so buffers are broadcast)
// in several buckets; every iteration one no_sync micro-step, then a
// synchronized one, and the optimizer step marked with a TimelineSpan.
// An error: its message, then its facts (support/error_facts.h), exit 1.
#include <ddp/ddp.h>

#include "../support/error_facts.h"

#include <torch/torch.h>

#include <iostream>
#include <string>

int main(int argc, char** argv) {
  bool hook = false;
  int iterations = 4;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--hook") {
      hook = true;
    } else if (arg == "--iterations" && i + 1 < argc) {
      iterations = std::stoi(argv[++i]);
    } else {
      std::cerr << "usage: timeline_job [--hook] [--iterations N]" << std::endl;
      return 2;
    }
  }
  try {
    auto pg = ddp::init_process_group();
    torch::manual_seed(1);
    torch::nn::Sequential net(torch::nn::Linear(32, 64), torch::nn::BatchNorm1d(64),
                              torch::nn::Tanh(), torch::nn::Linear(64, 64), torch::nn::Tanh(),
                              torch::nn::Linear(64, 4));
    // About 8 KiB per bucket: several buckets, launched while backward runs.
    ddp::DistributedDataParallel model(
        net, ddp::DistributedDataParallelOptions().bucket_cap_mb(0.008).first_bucket_cap_mb(0.004));
    if (hook) model->register_comm_hook(pg, ddp::allreduce_hook);
    torch::optim::SGD opt(model->parameters(), 0.01);
    torch::manual_seed(100 + pg->rank());
    for (int it = 0; it < iterations; ++it) {
      opt.zero_grad();
      {
        auto guard = model->no_sync();
        model->forward(torch::randn({16, 32})).pow(2).mean().backward();
      }
      model->forward(torch::randn({16, 32})).pow(2).mean().backward();
      ddp::TimelineSpan span("optimizer step");
      opt.step();
    }
    std::cout << "rank " << pg->rank() << ": " << iterations << " iterations, "
              << model->stats().bucket_count() << " buckets" << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << e.what() << std::endl;
    ddp::testing::print_error_facts(std::cerr, e);
    return 1;
  }
}
