// `ddp_bench train`: training iterations of ddp::DistributedDataParallel on
// a model (bench/models/models.h), together with the two halves of its limit,
// measured in the same run:
//
//   ddp                one DDP iteration: zero_grad, forward, loss, backward
//                      (gradients averaged), SGD step
//   ddp_copying        (only when asked for) the same on a second copy of the
//                      model whose DDP keeps its buckets out of the group's
//                      zero-copy memory (zero_copy_buckets(false)): the
//                      copying path, to weigh zero-copy against
//   ddp_batched        (only when asked for) the same with batched_grad_copy:
//                      each bucket filled in two calls once it is full
//   local              the same iteration on a plain copy of the model, no
//                      communication (every rank at once, as under DDP: the
//                      ranks share the machine's cores)
//   allreduce          one allreduce(SUM) of a float32 tensor of all the
//                      gradient bytes through ddp's Gloo group
//   allreduce_buckets  the allreduces of DDP's own buckets (sizes taken from
//                      ddp's stats after its bucket rebuild), issued back to
//                      back, all waited for: DDP's communication without compute
//
// The limit of an uncompressed DDP iteration is max(local, allreduce); the
// efficiency is limit / ddp. PyTorch's DDP runs in a separate process
// (bench/pytorch_ddp_train.py), alternated with this one by
// `bench/evaluate.py train`, which also checks that both sides hold the same
// parameters and combines the results (bench/eval/train_table.py).
//
// Method. Two phases, each interleaved by iteration (A B, B A, A B, ...) so
// that its measurements see the same machine state and none always goes
// first: ddp and local (as the Python side runs pytorch_ddp and
// pytorch_local), then allreduce and allreduce_buckets. Every sample starts with an
// untimed 1-element allreduce (all ranks start together); its time is the
// slowest rank's (gathered with a MAX allreduce at the end). The first
// --warmup samples of each are dropped. DDP's own split of each iteration
// (model->stats(): forward, backward compute, communication, overlap,
// finalize) is kept per iteration, on rank 0; with --timeline also the
// timeline of every timed DDP iteration (compute and each bucket's
// communication, as timestamps), which experiments/paper/eval/timeline.py
// turns into the blog's columns and Chrome traces.
//
// This file runs the measurements; the command line is train_config.cpp's
// and the table and JSON train_report.cpp's (both in train_bench.h).
#include "models/models.h"
#include "subcommands.h"
#include "timeline.h"
#include "train_bench.h"

#include <ddp/ddp.h>
#include <ddp/device.h>
#include <ddp/hooks.h>

#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>

namespace ddp_bench {
namespace {

// Bytes this host has sent on the interface named by DDP_SOCKET_IFNAME (as
// bench/netem sets it: the rank's veth inside its namespace), or -1 when
// unset (loopback: not measured) or unreadable.
double tx_bytes_now() {
  const char* ifname = std::getenv("DDP_SOCKET_IFNAME");
  if (!ifname || !*ifname) return -1;
  std::ifstream f(std::string("/sys/class/net/") + ifname + "/statistics/tx_bytes");
  double v = -1;
  if (!(f >> v)) return -1;
  return v;
}

// --device: the CPU, or this rank's GPU (ddp::local_device()).
torch::Device train_device(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  const torch::Device device = ddp::local_device();
  if (!device.is_cuda()) throw std::runtime_error("--device cuda: libtorch sees no GPU here");
  return device;
}

}  // namespace

int run_train(Args args) {
  const TrainConfig cfg = parse_train_config(args);
  check_world_size(cfg);
  torch::set_num_threads(static_cast<int>(cfg.threads));
  const int blas_threads = limit_openblas_threads(static_cast<int>(cfg.threads));

  ddp::InitOptions init = ddp_bench::init_options(static_cast<int>(cfg.gloo_threads));
  init.round_robin_groups(static_cast<int>(cfg.process_groups));
  ddp::ProcessGroupPtr pg = ddp::init_process_group(init);
  const int rank = pg->rank(), world = pg->size();
  const std::string torch_version = TORCH_VERSION;
  auto has = [&](const char* impl) {
    return std::find(cfg.impls.begin(), cfg.impls.end(), impl) != cfg.impls.end();
  };

  // The models: identical initial weights (same seed) on every rank and in
  // both the DDP and the local copy.
  const torch::Device device = train_device(cfg.device);
  auto on_device = [&](torch::nn::AnyModule net) {
    net.ptr()->to(device);
    return net;
  };
  torch::nn::AnyModule ddp_net = on_device(make_model(cfg.model));
  torch::nn::AnyModule local_net = on_device(make_model(cfg.model));
  ModelBatch batch = make_batch(cfg.model, static_cast<uint64_t>(cfg.seed + 1 + rank));
  batch.input = batch.input.to(device);
  batch.target = batch.target.to(device);

  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  int64_t elements = 0;
  for (const auto& item : ddp_net.ptr()->named_parameters()) {
    names.push_back(item.key());
    shapes.push_back(item.value().sizes().vec());
    elements += item.value().numel();
  }
  const int64_t grad_bytes = elements * 4;
  if (rank == 0) {
    std::fprintf(stderr,
                 "train: model %s: %zu parameter tensors, %lld elements (%.1f MiB of gradients); "
                 "%d ranks; %s\n",
                 describe(cfg.model).c_str(), names.size(), static_cast<long long>(elements),
                 grad_bytes / 1048576.0, world, machine_summary(torch_version).c_str());
  }

  // `impl`: ddp or one of its variants.
  auto make_ddp = [&](torch::nn::AnyModule net, const std::string& impl) {
    ddp::DistributedDataParallel m(net, ddp::DistributedDataParallelOptions()
                                            .process_group(pg)
                                            .bucket_cap_mb(cfg.bucket_cap_mb)
                                            .first_bucket_cap_mb(cfg.first_bucket_cap_mb)
                                            .overlap_communication(cfg.overlap)
                                            .gradient_as_bucket_view(cfg.gradient_as_bucket_view)
                                            .zero_copy_buckets(impl != "ddp_copying")
                                            .batched_grad_copy(impl == "ddp_batched" || cfg.batched_grad_copy)
                                            .init_sync(cfg.init_sync));
    if (cfg.hook == "fp16") {
      m->register_comm_hook(pg, ddp::fp16_compress_hook);
    } else if (cfg.hook == "bf16") {
      m->register_comm_hook(pg, ddp::bf16_compress_hook);
    } else if (cfg.hook.rfind("powersgd", 0) == 0) {
      m->register_comm_hook(ddp::PowerSGDState(pg, cfg.hook.back() - '0', 2), ddp::powerSGD_hook);
    } else if (cfg.hook == "batched_powersgd1") {
      m->register_comm_hook(ddp::PowerSGDState(pg, 1, 2), ddp::batched_powerSGD_hook);
    }
    return m;
  };
  // ddp and each variant asked for: a DDP module on its own copy of the
  // model, and its optimizer.
  std::map<std::string, ddp::DistributedDataParallel> ddps;
  std::map<std::string, std::unique_ptr<torch::optim::SGD>> ddp_opts;
  for (const char* impl : {"ddp", "ddp_copying", "ddp_batched"}) {
    if (!has(impl)) continue;
    auto net = impl == std::string("ddp") ? ddp_net : on_device(make_model(cfg.model));
    pg->allreduce(torch::zeros({1}, device))->wait();  // start together
    const auto start = Clock::now();
    auto m = make_ddp(net, impl);
    if (rank == 0) {
      std::fprintf(stderr, "train: %s constructed in %.1f ms (init_sync %s)\n", impl,
                   ms_between(start, Clock::now()), cfg.init_sync ? "true" : "false");
    }
    ddp_opts[impl] =
        std::make_unique<torch::optim::SGD>(m->parameters(), torch::optim::SGDOptions(cfg.lr));
    ddps.emplace(impl, std::move(m));
  }
  ddp::DistributedDataParallel model{nullptr};
  if (has("ddp")) model = ddps.at("ddp");
  torch::optim::SGD local_opt(local_net.ptr()->parameters(), torch::optim::SGDOptions(cfg.lr));

  // --timeline: rank 0 keeps the timed DDP iterations' timelines.
  Timeline timeline;
  bool record_timeline = false;

  at::Tensor sync = torch::zeros({1}, device);
  at::Tensor flat = torch::zeros({elements}, device);
  std::vector<at::Tensor> bucket_tensors;  // filled after DDP's first iterations

  // One timed sample of measurement `impl`.
  auto run_one = [&](const std::string& impl) {
    pg->allreduce(sync)->wait();  // start together
    TrainSample s;
    const auto t0 = Clock::now();
    if (is_training_impl(impl)) {
      const bool d = impl != "local";
      ddp::DistributedDataParallel ddp_model = d ? ddps.at(impl) : nullptr;
      torch::optim::SGD& opt = d ? *ddp_opts.at(impl) : local_opt;
      const bool record = impl == "ddp" && record_timeline;
      if (record) timeline.begin_iteration();
      opt.zero_grad();
      const auto t1 = Clock::now();
      Clock::time_point t2, t3;
      double forward_ms = 0, backward_ms = 0;  // summed over the micro-batches
      torch::Tensor loss;
      // --sync-every K: K micro-batches, the first K-1 accumulating locally.
      for (int64_t micro = 0; micro < cfg.sync_every; ++micro) {
        const bool last = micro + 1 == cfg.sync_every;
        const auto f0 = Clock::now();
        std::optional<ddp::NoSyncGuard> no_sync;
        if (d && !last) no_sync.emplace(*ddp_model);
        torch::Tensor out =
            d ? ddp_model->forward(batch.input) : local_net.forward<torch::Tensor>(batch.input);
        loss = model_loss(cfg.model, out, batch.target);
        t2 = Clock::now();
        loss.backward();
        t3 = Clock::now();
        forward_ms += ms_between(f0, t2);
        backward_ms += ms_between(t2, t3);
        if (record) {
          timeline.add("compute", "forward", f0, t2);
          if (!last) timeline.add("compute", "backward (no_sync)", t2, t3);
        }
      }
      opt.step();
      if (device.is_cuda()) torch::cuda::synchronize(device.index());
      const auto t4 = Clock::now();
      s.total_ms = ms_between(t0, t4);
      s.split = TrainSplit{ms_between(t0, t1), forward_ms, backward_ms, ms_between(t3, t4)};
      s.loss = loss.item<double>();
      if (d) s.stats = ddp_model->stats();
      if (record) {
        timeline.add_ddp_backward(s.stats, t3);
        timeline.add("compute", "zero_grad", t0, t1);
        timeline.add("compute", "step", t3, t4);
        timeline.end_iteration();
      }
    } else if (impl == "allreduce") {
      pg->allreduce(flat)->wait();
      s.total_ms = ms_between(t0, Clock::now());
    } else {  // allreduce_buckets
      std::vector<ddp::WorkPtr> works;
      works.reserve(bucket_tensors.size());
      for (auto& t : bucket_tensors) works.push_back(pg->allreduce(t));
      for (auto& w : works) w->wait();
      s.total_ms = ms_between(t0, Clock::now());
    }
    return s;
  };

  // Two phases, each interleaved by iteration (the measurements in order,
  // then reversed): first ddp and local, exactly what the Python side runs
  // for PyTorch (pytorch_ddp, pytorch_local), so that both DDPs run in the
  // same company; then allreduce and allreduce_buckets, which need DDP's
  // final buckets and would otherwise sit between DDP iterations (a 64 MiB
  // collective evicts the model from the caches).
  std::map<std::string, std::vector<TrainSample>> samples;
  std::vector<std::vector<std::string>> phases(2);
  for (const auto& impl : cfg.impls) {
    phases[is_training_impl(impl) ? 0 : 1].push_back(impl);
  }
  const int64_t rounds = cfg.warmup + cfg.iters;
  // Bytes sent on the link during phase 0's timed iterations (ddp and local;
  // run with --impls ddp to count DDP alone), per timed iteration.
  double tx_start = -1, tx_per_iter = -1;
  for (const auto& order : phases) {
    if (order.empty()) continue;
    if (std::find(order.begin(), order.end(), "allreduce_buckets") != order.end()) {
      for (int64_t b : model->stats().bucket_bytes) {
        bucket_tensors.push_back(torch::zeros({b / 4}, device));
      }
    }
    for (int64_t it = 0; it < rounds; ++it) {
      if (&order == &phases[0] && it == cfg.warmup) tx_start = tx_bytes_now();
      record_timeline = cfg.timeline && rank == 0 && &order == &phases[0] && it >= cfg.warmup;
      std::vector<std::string> this_round = order;
      if (it % 2) std::reverse(this_round.begin(), this_round.end());
      for (const auto& impl : this_round) {
        TrainSample s = run_one(impl);
        if (it >= cfg.warmup)
          samples[impl].push_back(s);
        else
          samples[impl + "/warmup"].push_back(s);
      }
      if (&order == &phases[0] && it + 1 == rounds && tx_start >= 0) {
        const double end = tx_bytes_now();
        if (end >= 0) tx_per_iter = (end - tx_start) / static_cast<double>(cfg.iters);
      }
      if (rank == 0 &&
          (it + 1 == cfg.warmup || (it >= cfg.warmup && (it - cfg.warmup + 1) % 5 == 0))) {
        std::string line;
        for (const auto& impl : order) {
          const auto& v = samples[it < cfg.warmup ? impl + "/warmup" : impl];
          if (!v.empty()) line += "  " + impl + " " + format_fixed(v.back().total_ms, 1) + " ms";
        }
        std::fprintf(stderr, "train: %s %lld/%lld:%s\n", it < cfg.warmup ? "warm-up" : "iteration",
                     static_cast<long long>(it < cfg.warmup ? it + 1 : it - cfg.warmup + 1),
                     static_cast<long long>(it < cfg.warmup ? cfg.warmup : cfg.iters),
                     line.c_str());
      }
    }
  }

  // The slowest rank's time per sample.
  std::map<std::string, std::vector<double>> slowest;
  for (const auto& impl : cfg.impls) {
    const auto& v = samples[impl];
    at::Tensor t = torch::empty({static_cast<int64_t>(v.size())}, torch::kDouble);
    for (size_t i = 0; i < v.size(); ++i) t.data_ptr<double>()[i] = v[i].total_ms;
    pg->allreduce(t, ddp::ReduceOp::MAX)->wait();
    slowest[impl] = std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  }
  // Every rank's bytes per iteration (-1: not measured), gathered on rank 0.
  std::vector<double> tx_ranks;
  {
    at::Tensor t = torch::zeros({world}, torch::kDouble);
    t.data_ptr<double>()[rank] = tx_per_iter;
    pg->allreduce(t)->wait();
    tx_ranks.assign(t.data_ptr<double>(), t.data_ptr<double>() + world);
  }
  pg->barrier()->wait();
  if (rank != 0) return 0;

  TrainResults results;
  results.names = std::move(names);
  results.shapes = std::move(shapes);
  results.elements = elements;
  results.world = world;
  results.blas_threads = blas_threads;
  results.samples = std::move(samples);
  results.slowest = std::move(slowest);
  results.tx_ranks = std::move(tx_ranks);
  results.timeline = &timeline;
  report_train(cfg, std::move(results));
  return 0;
}

}  // namespace ddp_bench
