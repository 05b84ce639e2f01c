// zero_bench: ZeroRedundancyOptimizer against the unsharded optimizer, DDP
// on the evaluation MLP (bench/models/mlp.h), one configuration per run:
//
//   ddprun --nproc-per-node 2 build/bench/zero_bench --optimizer zero --iters 10
//
// Prints one JSON line (rank 0): optimizer-state bytes of every rank and the
// median iteration time, an iteration's time being the slowest rank's (each
// preceded by an untimed 1-element allreduce). `bench/evaluate.py zero` runs it
// interleaved with PyTorch's twin, bench/pytorch_zero.py.
#include "bench_util.h"
#include "models/mlp.h"

#include <ddp/ddp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {

int64_t plain_state_bytes(const torch::optim::Optimizer& opt) {
  const auto wrapped = ddp::zero_wrapped(torch::optim::AdamOptions());
  int64_t bytes = 0;
  for (const auto& item : opt.state()) {
    for (const auto& t : wrapped.state_tensors(*item.second)) {
      if (t.defined()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
    }
  }
  return bytes;
}

const char* const kUsage =
    "usage: zero_bench [--optimizer zero|zero-overlap|adam] [--iters N] [--warmup N] "
    "[--batch N] [--layers N]   (under ddprun)\n";

int run(ddp_bench::Args args) {
  const std::string optimizer = args.take("--optimizer").value_or("zero");
  if (optimizer != "zero" && optimizer != "zero-overlap" && optimizer != "adam") {
    throw ddp_bench::UsageError("--optimizer is zero, zero-overlap or adam, got " + optimizer);
  }
  const int64_t iters = args.take_int("--iters", 1, 1000000).value_or(10);
  const int64_t warmup = args.take_int("--warmup", 0, 1000000).value_or(2);
  const int64_t batch = args.take_int("--batch", 1, 1 << 20).value_or(32);
  const int64_t layers = args.take_int("--layers", 1, 1024).value_or(16);
  args.expect_empty();
  torch::set_num_threads(1);  // as PyTorch's side; OPENBLAS_NUM_THREADS=1 from the script
  auto pg = ddp::init_process_group();
  torch::manual_seed(0);
  ddp_bench::models::Mlp net(static_cast<int>(layers));
  ddp::DistributedDataParallel model(net);
  std::unique_ptr<torch::optim::Optimizer> opt;
  ddp::ZeroRedundancyOptimizer* zero = nullptr;
  if (optimizer != "adam") {
    const bool overlap = optimizer == "zero-overlap";
    auto z = std::make_unique<ddp::ZeroRedundancyOptimizer>(
        model->parameters(), torch::optim::AdamOptions(1e-4),
        ddp::ZeroOptions().overlap_with_ddp(overlap));
    zero = z.get();
    if (overlap) model->register_comm_hook(zero, ddp::zero_hook);
    opt = std::move(z);
  } else {
    opt =
        std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-4));
  }
  torch::manual_seed(1 + pg->rank());
  auto x = torch::randn({batch, 1024});
  auto y = torch::randn({batch, 1024});

  std::vector<double> times;
  at::Tensor sync = at::zeros({1});
  for (int64_t i = 0; i < warmup + iters; ++i) {
    pg->allreduce(sync)->wait();
    const auto t0 = std::chrono::steady_clock::now();
    opt->zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    opt->step();
    at::Tensor ms = at::tensor(
        {std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()});
    pg->allreduce(ms, ddp::ReduceOp::MAX)->wait();
    if (i >= warmup) times.push_back(ms.item<double>());
  }
  std::sort(times.begin(), times.end());
  at::Tensor mine = at::tensor({zero ? zero->state_bytes() : plain_state_bytes(*opt)}, at::kLong);
  std::vector<at::Tensor> all;
  for (int r = 0; r < pg->size(); ++r) all.push_back(at::empty({1}, at::kLong));
  pg->allgather(all, mine)->wait();
  if (pg->rank() == 0) {
    std::string bytes;
    for (const auto& t : all)
      bytes += (bytes.empty() ? "" : ", ") + std::to_string(t.item<int64_t>());
    std::printf(
        "{\"impl\": \"ddp\", \"optimizer\": \"%s\", \"world\": %d, \"backend\": \"%s\", "
        "\"state_bytes\": [%s], \"iter_ms_median\": %.3f}\n",
        optimizer.c_str(), pg->size(), pg->backend_name().c_str(), bytes.c_str(),
        times[times.size() / 2]);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ddp_bench::run_main("zero_bench", {argv + 1, argv + argc}, kUsage, run);
}
