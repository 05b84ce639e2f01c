// layer_drop_bench: layer-drop hints (paper §6.2.2) against what a user has
// without them, on a residual MLP with stochastic depth, in one run with the
// four interleaved round by round:
//
//   ddprun --nproc-per-node 2 build/bench/layer_drop_bench [--json out.jsonl]
//
//   hints        --blocks blocks, layer_drop_hints, the dropped blocks hinted
//   find_unused  --blocks blocks, find_unused_parameters (PyTorch's way)
//   skip_unused  the same with skip_all_reduce_unused_params (PyTorch 2.8):
//                the unused blocks found by the walk are not sent
//   removed      the live blocks' count of blocks (a model without the
//                dropped ones), plain DDP: the floor hints aim for
//
// Each iteration drops exactly --drop of the blocks (default half), drawn
// from a seed every rank shares. An iteration (zero_grad, forward, backward,
// SGD step) is timed as the slowest rank's, each preceded by an untimed
// one-element allreduce. Rank 0 prints a table (with DDP's own split of
// rank 0's iterations: forward, backward's compute, and what follows it:
// the rest of communication) and, with --json, one line per configuration.
// Public API only.
#include "bench_util.h"

#include <ddp/ddp.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

const char* const kUsage = R"(usage: layer_drop_bench [options]   (under ddprun)
  --blocks N   residual blocks, each Linear-ReLU-Linear (default 24)
  --drop P     fraction of blocks dropped each iteration (default 0.5)
  --width W    features (default 512)
  --batch B    samples per rank (default 16)
  --rounds R   rounds, each K timed iterations of every configuration in
               rotating order (default 5)
  --iters K    (default 10)
  --warmup W   untimed iterations of each configuration first (default 3)
  --json PATH  rank 0 appends one JSON line per configuration
)";

// x + fc2(relu(fc1(x))) per block; bit k of `drop` skips block k.
struct ResidualMlpImpl : torch::nn::Module {
  std::vector<torch::nn::Linear> fc1, fc2;
  ResidualMlpImpl(int blocks, int width) {
    for (int k = 0; k < blocks; ++k) {
      fc1.push_back(
          register_module("block" + std::to_string(k) + "_fc1", torch::nn::Linear(width, width)));
      fc2.push_back(
          register_module("block" + std::to_string(k) + "_fc2", torch::nn::Linear(width, width)));
    }
  }
  torch::Tensor forward(torch::Tensor x, int64_t drop) {
    for (size_t k = 0; k < fc1.size(); ++k) {
      if (!(drop >> k & 1)) x = x + fc2[k](torch::relu(fc1[k](x)));
    }
    return x;
  }
  std::vector<torch::Tensor> parameters_of(int64_t drop) {
    std::vector<torch::Tensor> out;
    for (size_t k = 0; k < fc1.size(); ++k) {
      if (!(drop >> k & 1)) continue;
      for (auto& p : fc1[k]->parameters()) out.push_back(p);
      for (auto& p : fc2[k]->parameters()) out.push_back(p);
    }
    return out;
  }
};
TORCH_MODULE(ResidualMlp);

struct Config {
  std::string name;
  ResidualMlp net{nullptr};
  std::unique_ptr<ddp::DistributedDataParallel> model;
  std::unique_ptr<torch::optim::SGD> opt;
  bool hints = false, drops = false;  // drops: the 24-block model skips blocks
  std::vector<double> ms;
  // DDP's own split of each timed iteration on rank 0 (IterationStats).
  std::vector<double> forward_ms, backward_ms, finalize_ms;
  double bytes_sent = 0;  // per iteration, the last one's
};

// The blocks dropped in iteration `i`: `count` of `blocks`, as a mask.
int64_t drop_mask(int64_t i, int blocks, int count) {
  std::vector<int> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(1000 + i);
  std::shuffle(order.begin(), order.end(), rng);
  int64_t mask = 0;
  for (int k = 0; k < count; ++k) mask |= int64_t{1} << order[k];
  return mask;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

using Clock = std::chrono::steady_clock;

int run(ddp_bench::Args args) {
  const int blocks = static_cast<int>(args.take_int("--blocks", 1, 62).value_or(24));
  const double drop = args.take_double("--drop", 0).value_or(0.5);
  if (drop > 0.99) throw ddp_bench::UsageError("--drop must be at most 0.99");
  const int64_t width = args.take_int("--width", 1, 1 << 16).value_or(512);
  const int64_t batch = args.take_int("--batch", 1, 1 << 20).value_or(16);
  const int rounds = static_cast<int>(args.take_int("--rounds", 1, 10000).value_or(5));
  const int iters = static_cast<int>(args.take_int("--iters", 1, 100000).value_or(10));
  const int warmup = static_cast<int>(args.take_int("--warmup", 0, 100000).value_or(3));
  const std::string json = args.take("--json").value_or("");
  args.expect_empty();
  const int dropped = static_cast<int>(blocks * drop + 0.5);

  torch::set_num_threads(1);
  auto pg = ddp::init_process_group();
  std::vector<Config> configs(4);
  configs[0].name = "hints";
  configs[1].name = "find_unused";
  configs[2].name = "skip_unused";
  configs[3].name = "removed";
  for (auto& c : configs) {
    torch::manual_seed(0);
    c.net = ResidualMlp(c.name == "removed" ? blocks - dropped : blocks, width);
    c.hints = c.name == "hints";
    c.drops = c.name != "removed";
    c.model = std::make_unique<ddp::DistributedDataParallel>(
        c.net,
        ddp::DistributedDataParallelOptions()
            .layer_drop_hints(c.hints)
            .find_unused_parameters(c.name == "find_unused" || c.name == "skip_unused")
            .skip_all_reduce_unused_params(c.name == "skip_unused"));
    c.opt = std::make_unique<torch::optim::SGD>((*c.model)->parameters(),
                                                torch::optim::SGDOptions(1e-3));
  }
  torch::manual_seed(1 + pg->rank());
  const auto x = torch::randn({batch, width});
  const auto y = torch::randn({batch, width});

  at::Tensor sync = at::zeros({1});
  int64_t iteration = 0;
  auto step = [&](Config& c, bool timed) {
    const int64_t mask = c.drops ? drop_mask(iteration++, blocks, dropped) : 0;
    pg->allreduce(sync)->wait();
    const auto t0 = Clock::now();
    c.opt->zero_grad();
    auto& model = *c.model;
    if (c.hints) model->hint_unused_parameters(c.net->parameters_of(mask));
    torch::mse_loss(model->forward(x, mask), y).backward();
    c.opt->step();
    at::Tensor ms =
        at::tensor({std::chrono::duration<double, std::milli>(Clock::now() - t0).count()});
    pg->allreduce(ms, ddp::ReduceOp::MAX)->wait();
    const ddp::IterationStats stats = model->stats();
    if (timed) {
      c.ms.push_back(ms.item<double>());
      c.forward_ms.push_back(stats.forward_ms);
      c.backward_ms.push_back(stats.backward_compute_ms);
      c.finalize_ms.push_back(stats.finalize_ms);
    }
    const auto& bytes = stats.bucket_bytes;
    c.bytes_sent = static_cast<double>(std::accumulate(bytes.begin(), bytes.end(), int64_t{0}));
  };
  for (auto& c : configs) {
    for (int i = 0; i < warmup; ++i) step(c, false);
  }
  for (int r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < configs.size(); ++k) {
      Config& c = configs[(k + r) % configs.size()];
      for (int i = 0; i < iters; ++i) step(c, true);
    }
  }
  if (pg->rank() != 0) return 0;

  std::printf(
      "layer_drop_bench: %d ranks (%s), %d residual blocks of %lld, %d dropped per "
      "iteration, batch %lld per rank, %d x %d timed iterations each\n\n",
      pg->size(), pg->backend_name().c_str(), blocks, static_cast<long long>(width), dropped,
      static_cast<long long>(batch), rounds, iters);
  std::printf(
      "| configuration | median ms | p10 | p90 | forward | backward | after backward "
      "| MB sent per iteration |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  std::map<std::string, double> median;
  for (const auto& c : configs) {
    median[c.name] = percentile(c.ms, 0.5);
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f |\n", c.name.c_str(),
                median[c.name], percentile(c.ms, 0.1), percentile(c.ms, 0.9),
                percentile(c.forward_ms, 0.5), percentile(c.backward_ms, 0.5),
                percentile(c.finalize_ms, 0.5), c.bytes_sent / 1e6);
  }
  const double vs_unused = median["hints"] / median["find_unused"];
  const double vs_removed = median["hints"] / median["removed"];
  std::printf(
      "\nhints / find_unused = %.3f (target <= 0.80)\nhints / removed = %.3f "
      "(target <= 1.05)\nskip_unused / find_unused = %.3f\n",
      vs_unused, vs_removed, median["skip_unused"] / median["find_unused"]);
  if (!json.empty()) {
    std::ofstream out(json, std::ios::app);
    for (const auto& c : configs) {
      out << "{\"config\": \"" << c.name << "\", \"world\": " << pg->size() << ", \"backend\": \""
          << pg->backend_name() << "\", \"blocks\": " << blocks << ", \"dropped\": " << dropped
          << ", \"width\": " << width << ", \"batch\": " << batch
          << ", \"median_ms\": " << median[c.name] << ", \"p10_ms\": " << percentile(c.ms, 0.1)
          << ", \"p90_ms\": " << percentile(c.ms, 0.9) << ", \"bytes_sent\": " << c.bytes_sent
          << "}\n";
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ddp_bench::run_main("layer_drop_bench", {argv + 1, argv + argc}, kUsage, run);
}
