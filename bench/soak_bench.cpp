// `ddp_bench soak`: what a long DDP run holds on to. An MLP trains under
// DistributedDataParallel for many iterations, keeping nothing between them,
// and every rank samples its resident memory (RSS), open file descriptors
// and threads, and the job's shm segments in /dev/shm. Rank 0 writes every
// rank's series and, per measure and rank, the least-squares slope over the
// samples after the warm-up: per minute and per iteration. A flat run has
// slopes near 0; a leak shows as a steady one (docs/benchmarks.md, "Soak").
#include "subcommands.h"

#include <ddp/ddp.h>

#include <torch/torch.h>

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace ddp_bench {

const char* const kSoakUsage =
    R"(usage: ddp_bench soak [options]
Run once per rank, e.g. ddprun --nproc-per-node 2 ddp_bench soak --json soak.json
(the backend: $DDP_BACKEND, else gloo). Trains --layers x Linear(--width,
--width) with ReLU (MSE on random data, SGD) under DistributedDataParallel
with --bucket-cap-mb buckets for --iters iterations, keeping nothing between
them; every --sample-every iterations each rank samples its RSS, open file
descriptors and threads, and the /dev/shm segments of ddp's shm backend.
Rank 0 prints each measure's slope per rank over the samples after
--warmup-iters (least squares, per minute and per iteration) and writes the
series and slopes to --json.

options:
  --iters N          iterations (default 150000)
  --warmup-iters W   iterations before the slopes' samples (default N / 10)
  --sample-every S   iterations between samples (default 1000)
  --layers L         Linear layers (default 6)
  --width D          their width (default 256)
  --batch B          samples per rank and iteration (default 32)
  --bucket-cap-mb X  DDP's bucket size in MiB (default 0.25)
  --gloo-threads G   worker threads of ddp's Gloo group (default 1)
  --json PATH        rank 0 writes the result there
)";

namespace {

// The measures, in the order of a sample.
const char* const kMeasures[] = {"rss_kb", "fds", "threads", "shm_segments"};
constexpr int kCount = 4;

int64_t rss_kb() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// Entries of `dir` whose name starts with `prefix` ("." and ".." excluded).
int64_t entries(const char* dir, const std::string& prefix) {
  int64_t n = 0;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != ".." && name.rfind(prefix, 0) == 0) ++n;
    }
    closedir(d);
  }
  return n;
}

int64_t threads() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Threads:", 0) == 0) return std::stoll(line.substr(8));
  }
  return -1;
}

// Least squares: the slope of y over x.
double slope(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = x.size();
  if (n < 2) return 0;
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) mx += x[i] / n, my += y[i] / n;
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < n; ++i) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx);
  const double b = sxx > 0 ? sxy / sxx : 0;
  return std::abs(b) < 1e-12 ? 0 : b;  // a constant series: rounding, not a slope
}

}  // namespace

int run_soak(Args args) {
  const int64_t iters = args.take_int("--iters", 1, int64_t{1} << 40).value_or(150000);
  const int64_t warmup = args.take_int("--warmup-iters", 0, iters).value_or(iters / 10);
  const int64_t every = args.take_int("--sample-every", 1, iters).value_or(1000);
  const int64_t layers = args.take_int("--layers", 1, 1000).value_or(6);
  const int64_t width = args.take_int("--width", 1, 1 << 16).value_or(256);
  const int64_t batch = args.take_int("--batch", 1, 1 << 20).value_or(32);
  const double cap = args.take_double("--bucket-cap-mb", 0).value_or(0.25);
  const int gloo_threads = static_cast<int>(args.take_int("--gloo-threads", 1, 64).value_or(1));
  const auto json_path = args.take("--json");
  args.expect_empty();

  torch::set_num_threads(1);
  ddp::ProcessGroupPtr pg = ddp::init_process_group(init_options(gloo_threads));
  const int rank = pg->rank(), world = pg->size();
  torch::manual_seed(0);
  torch::nn::Sequential net;
  for (int64_t l = 0; l < layers; ++l) {
    net->push_back(torch::nn::Linear(width, width));
    net->push_back(torch::nn::ReLU());
  }
  ddp::DistributedDataParallel model(
      net, ddp::DistributedDataParallelOptions().process_group(pg).bucket_cap_mb(cap));
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1 + rank);

  // samples[k]: iteration, seconds, then the measures.
  std::vector<std::vector<double>> samples;
  const auto start = std::chrono::steady_clock::now();
  auto sample = [&](int64_t iteration) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    samples.push_back({static_cast<double>(iteration), seconds, static_cast<double>(rss_kb()),
                       static_cast<double>(entries("/proc/self/fd", "")),
                       static_cast<double>(threads()),
                       static_cast<double>(entries("/dev/shm", "ddp-shm-"))});
  };
  for (int64_t i = 0; i < iters; ++i) {
    if (i % every == 0) sample(i);
    opt.zero_grad();
    at::Tensor x = at::randn({batch, width}, gen);
    torch::mse_loss(model->forward(x), x).backward();
    opt.step();
  }
  sample(iters);

  // Every rank's samples to rank 0 (the same count on every rank).
  const int64_t fields = 2 + kCount, count = static_cast<int64_t>(samples.size());
  at::Tensor mine = at::empty({count, fields}, at::kDouble);
  for (int64_t k = 0; k < count; ++k) {
    for (int64_t f = 0; f < fields; ++f) mine[k][f] = samples[k][f];
  }
  std::vector<at::Tensor> all(world);
  for (auto& t : all) t = at::empty_like(mine);
  pg->allgather(all, mine)->wait();
  if (rank != 0) return 0;

  Json result = Json::object();
  result.set("benchmark", "soak");
  Json config = Json::object();
  config.set("world_size", world)
      .set("backend", pg->backend_name())
      .set("iters", iters)
      .set("warmup_iters", warmup)
      .set("sample_every", every)
      .set("layers", layers)
      .set("width", width)
      .set("batch", batch)
      .set("bucket_cap_mb", cap);
  result.set("config", config);
  Json ranks = Json::array();
  std::printf("soak: %lld iterations on %d rank(s) [%s], slopes after iteration %lld:\n",
              static_cast<long long>(iters), world, pg->backend_name().c_str(),
              static_cast<long long>(warmup));
  for (int r = 0; r < world; ++r) {
    at::Tensor s = all[r];
    std::vector<double> minutes, iterations;
    for (int64_t k = 0; k < count; ++k) {
      if (s[k][0].item<double>() < static_cast<double>(warmup)) continue;
      iterations.push_back(s[k][0].item<double>());
      minutes.push_back(s[k][1].item<double>() / 60);
    }
    Json one = Json::object();
    one.set("rank", r);
    Json series = Json::object(), slopes = Json::object();
    Json its = Json::array(), secs = Json::array();
    for (int64_t k = 0; k < count; ++k) {
      its.push(s[k][0].item<double>());
      secs.push(s[k][1].item<double>());
    }
    series.set("iteration", its).set("seconds", secs);
    std::printf("  rank %d:", r);
    for (int m = 0; m < kCount; ++m) {
      Json values = Json::array();
      std::vector<double> kept;
      for (int64_t k = 0; k < count; ++k) {
        const double v = s[k][2 + m].item<double>();
        values.push(v);
        if (s[k][0].item<double>() >= static_cast<double>(warmup)) kept.push_back(v);
      }
      series.set(kMeasures[m], values);
      const double per_minute = slope(minutes, kept), per_iteration = slope(iterations, kept);
      Json both = Json::object();
      both.set("per_minute", per_minute).set("per_iteration", per_iteration);
      slopes.set(kMeasures[m], both);
      std::printf(" %s %+.3g/min (%+.3g/iteration; %.0f -> %.0f)", kMeasures[m], per_minute,
                  per_iteration, kept.empty() ? 0.0 : kept.front(),
                  kept.empty() ? 0.0 : kept.back());
    }
    std::printf("\n");
    one.set("slopes", slopes).set("series", series);
    ranks.push(one);
  }
  result.set("ranks", ranks);
  if (json_path) write_result("ddp_bench soak", *json_path, result);
  return 0;
}

}  // namespace ddp_bench
