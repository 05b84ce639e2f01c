// SyncBatchNorm and ZeRO inside DDP on real processes:
//   ddprun --nproc-per-node N sync_batchnorm_ddp
// Ranks hold 2r+1 samples each (uneven); a conv net with BatchNorm2d,
// converted, wrapped in DDP, trained with ZeRO-sharded Adam, must end where
// the same net trains in one process on the whole batch (each process
// computes that reference itself). GoogleTest, one process per rank
// (support/rank_gtest.h); with --device cuda, nets and data live on the GPU.
#include "support/rank_gtest.h"

#include <ddp/ddp.h>

#include <torch/torch.h>

#include <numeric>

namespace {

// No conv bias: BatchNorm cancels it, its gradient is rounding noise, and
// Adam would turn that noise into steps of size lr.
torch::nn::Sequential make_net() {
  torch::nn::Sequential net(torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 4, 3).bias(false)),
                            torch::nn::BatchNorm2d(4), torch::nn::Tanh(), torch::nn::Flatten(),
                            torch::nn::Linear(64, 3));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(31);
  torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) p.copy_(at::randn(p.sizes(), gen) * 0.3);
  net->to(torch::kFloat64);
  return net;
}

}  // namespace

TEST(SyncBatchNormInDdp, ZeroShardedAdamOnUnevenBatchesEqualsOneProcess) {
  using ddp::testing::check;
  const torch::Device device = ddp::testing::this_rank().device;
  const auto& pg = ddp::testing::this_rank().group;
  const int rank = pg->rank(), world = pg->size();
  const int steps = 3;
  std::vector<int64_t> sizes(world);
  for (int r = 0; r < world; ++r) sizes[r] = 2 * r + 1;
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  const int64_t begin = std::accumulate(sizes.begin(), sizes.begin() + rank, int64_t{0});
  auto gen = at::make_generator<at::CPUGeneratorImpl>(32);
  std::vector<torch::Tensor> xs, gs;
  for (int s = 0; s < steps; ++s) {
    xs.push_back(at::randn({total, 2, 6, 6}, gen, torch::kFloat64).to(device));
    gs.push_back(at::randn({total, 3}, gen, torch::kFloat64).to(device));
  }

  auto reference = make_net();
  reference->to(device);
  torch::optim::Adam plain(reference->parameters(), torch::optim::AdamOptions(1e-2));
  for (int s = 0; s < steps; ++s) {
    plain.zero_grad();
    ((reference->forward(xs[s]) * gs[s]).sum() / world).backward();
    plain.step();
  }

  auto net = make_net();
  ddp::convert_sync_batchnorm(net.ptr());
  net->to(device);
  ddp::DistributedDataParallel model(
      net, ddp::DistributedDataParallelOptions().broadcast_buffers(false));
  ddp::ZeroRedundancyOptimizer opt(model->parameters(), torch::optim::AdamOptions(1e-2));
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    (model->forward(xs[s].narrow(0, begin, sizes[rank])) * gs[s].narrow(0, begin, sizes[rank]))
        .sum()
        .backward();
    opt.step();
  }
  const auto want = reference->named_parameters();
  for (const auto& item : net->named_parameters()) {
    const double diff = (item.value() - want[item.key()]).abs().max().item<double>();
    check(diff <= 1e-10, "parameter " + item.key() + " equals one process's",
          "differs by " + c10::str(diff));
  }
  const auto want_buffers = reference->named_buffers();
  for (const auto& item : net->named_buffers()) {
    const double diff =
        (item.value().to(torch::kFloat64) - want_buffers[item.key()].to(torch::kFloat64))
            .abs()
            .max()
            .item<double>();
    check(diff <= 1e-10, "buffer " + item.key() + " equals one process's",
          "differs by " + c10::str(diff));
  }
  model->eval();
  auto local =
      model->forward(xs[0].narrow(0, begin, sizes[rank]));  // no collective: ranks may differ
  check(local.size(0) == sizes[rank], "evaluation without collectives");
}
