// `ddp_bench train`: training iterations of ddp::DistributedDataParallel on
// a model (bench/models/models.h), together with the two halves of its limit,
// measured in the same run:
//
//   ddp                one DDP iteration: zero_grad, forward, loss, backward
//                      (gradients averaged), SGD step
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
// communication, as timestamps), which bench/eval/timeline.py turns into the
// blog's columns and Chrome traces.
#include "models/models.h"
#include "subcommands.h"
#include "timeline.h"

#include <ddp/ddp.h>
#include <ddp/hooks.h>

#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>

namespace ddp_bench {

const char* const kTrainUsage = R"(usage: ddp_bench train --model M --world-size N [options]
Run once per rank under a launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT, e.g.
  ddprun --nproc-per-node 2 ddp_bench train --model mlp --world-size 2
  bench/netem --rate 1g -- build/bench/ddp_bench train --model mlp --world-size 2
Times training iterations of ddp::DistributedDataParallel ("ddp"), the same
iteration without DDP ("local"), one allreduce of all gradient bytes
("allreduce") and DDP's bucket allreduces alone ("allreduce_buckets"),
interleaved by iteration in two phases (ddp and local, then the two allreduce
measurements); rank 0 prints a table and writes JSON.
`bench/evaluate.py train` runs this against PyTorch's DDP (bench/pytorch_ddp_train.py).

options:
  --model M            mlp (16 x Linear(1024,1024), ReLU, MSE), resnet18 (CIFAR
                       stem, 10 classes), resnet50, bert_small, bert_base
                       (bench/models/models.h; cross-entropy)
  --world-size N       number of ranks; must equal $WORLD_SIZE
  --bucket-cap-mb X    DDP bucket size in MiB (default 25)
  --first-bucket-cap-mb X  DDP's first bucket in MiB (default 1)
  --iters K            timed iterations per measurement (default 20)
  --warmup W           untimed iterations per measurement first (default 3)
  --batch B            samples per rank (default: the model's, models.h)
  --image-size S       resnets' input is 3 x S x S (default: the model's)
  --seq-len L          berts' tokens per sample (default: the model's)
  --process-groups K   K Gloo groups used round-robin (RoundRobinProcessGroup;
                       default 1)
  --sync-every K       an iteration is K micro-batches, the first K-1 under
                       no_sync (gradients accumulate locally), one SGD step at
                       the end (default 1); times are per iteration
  --impls LIST         any of ddp,local,allreduce,allreduce_buckets
                       (default all; allreduce_buckets needs ddp)
  --lr R               SGD learning rate (default 0.01)
  --seed S             model seed (default 0); rank r's data seed is S+1+r
  --threads T          intra-op threads per rank (default 1): torch::set_num_threads
                       and OpenBLAS's own pool (openblas_set_num_threads)
  --gloo-threads G     worker threads of ddp's Gloo group (default 1)
  --no-overlap         DDP reduces all buckets after backward (diagnosis)
  --hook NAME          communication hook: none (default), fp16, bf16,
                       powersgd1, powersgd2, powersgd4 (powerSGD_hook with that
                       matrix_approximation_rank), batched_powersgd1; PowerSGD
                       with start_powerSGD_iter=2, error feedback and warm
                       start on (use --warmup >= 3 so that timed iterations
                       are all compressed)
  --timeline           keep each timed DDP iteration's timeline in the JSON
                       (events with timestamps: forward, backward compute,
                       step; each bucket's launch to completion)
  --print-params       rank 0 prints every parameter's name and shape
  --tag TEXT           recorded in the JSON (e.g. the round of a comparison)
  --json PATH          rank 0 writes the results there (with every sample)
)";

namespace {

const char* const kImplNames[] = {"ddp", "local", "allreduce", "allreduce_buckets"};

struct Config {
  ModelOptions model;
  int world_size = 0;
  double bucket_cap_mb = 25;
  double first_bucket_cap_mb = 1;
  int64_t iters = 20;
  int64_t warmup = 3;
  int64_t process_groups = 1;
  int64_t sync_every = 1;
  bool timeline = false;
  std::vector<std::string> impls;
  double lr = 0.01;
  int64_t seed = 0;
  int64_t threads = 1;
  int64_t gloo_threads = 1;
  bool overlap = true;
  bool print_params = false;
  std::string hook = "none";
  std::string tag;
  std::string json_path;
};

Config parse(Args& args) {
  Config c;
  c.model.name = args.take("--model").value_or("");
  if (c.model.name.empty()) throw UsageError("--model is required, e.g. --model mlp");
  auto ws = args.take_int("--world-size", 1, 1 << 20);
  if (!ws) throw UsageError("--world-size is required (the number of ranks, e.g. 2)");
  c.world_size = static_cast<int>(*ws);
  c.bucket_cap_mb = args.take_double("--bucket-cap-mb", 0.0).value_or(c.bucket_cap_mb);
  c.first_bucket_cap_mb =
      args.take_double("--first-bucket-cap-mb", 0.0).value_or(c.first_bucket_cap_mb);
  c.iters = args.take_int("--iters", 1, 1000000).value_or(c.iters);
  c.warmup = args.take_int("--warmup", 0, 1000000).value_or(c.warmup);
  c.model.batch = args.take_int("--batch", 1, 1 << 20).value_or(0);
  c.model.image_size = args.take_int("--image-size", 8, 4096).value_or(0);
  c.model.seq_len = args.take_int("--seq-len", 1, 1 << 20).value_or(0);
  c.process_groups = args.take_int("--process-groups", 1, 64).value_or(c.process_groups);
  c.sync_every = args.take_int("--sync-every", 1, 1 << 20).value_or(c.sync_every);
  c.timeline = args.take_flag("--timeline");
  std::stringstream impls(args.take("--impls").value_or("ddp,local,allreduce,allreduce_buckets"));
  for (std::string name; std::getline(impls, name, ',');) {
    if (std::find(std::begin(kImplNames), std::end(kImplNames), name) == std::end(kImplNames)) {
      throw UsageError("unknown measurement '" + name +
                       "' (ddp, local, allreduce, allreduce_buckets)");
    }
    if (std::find(c.impls.begin(), c.impls.end(), name) == c.impls.end()) c.impls.push_back(name);
  }
  if (c.impls.empty()) throw UsageError("--impls is empty");
  const bool has_ddp = std::find(c.impls.begin(), c.impls.end(), "ddp") != c.impls.end();
  const bool has_buckets =
      std::find(c.impls.begin(), c.impls.end(), "allreduce_buckets") != c.impls.end();
  if (has_buckets && !has_ddp) throw UsageError("allreduce_buckets needs ddp in --impls");
  c.lr = args.take_double("--lr", 0.0).value_or(c.lr);
  c.seed = args.take_int("--seed", 0, int64_t{1} << 40).value_or(c.seed);
  c.model.seed = c.seed;
  try {
    c.model = with_defaults(c.model);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  c.threads = args.take_int("--threads", 1, 1024).value_or(c.threads);
  c.gloo_threads = args.take_int("--gloo-threads", 1, 64).value_or(c.gloo_threads);
  c.overlap = !args.take_flag("--no-overlap");
  c.print_params = args.take_flag("--print-params");
  c.hook = args.take("--hook").value_or(c.hook);
  static const char* const kHooks[] = {"none",      "fp16",      "bf16",
                                       "powersgd1", "powersgd2", "powersgd4",
                                       "batched_powersgd1"};
  if (std::find_if(std::begin(kHooks), std::end(kHooks),
                   [&](const char* h) { return c.hook == h; }) == std::end(kHooks)) {
    throw UsageError("unknown hook '" + c.hook +
                     "' (none, fp16, bf16, powersgd1, powersgd2, powersgd4, batched_powersgd1)");
  }
  c.tag = args.take("--tag").value_or("");
  c.json_path = args.take("--json").value_or("");
  args.expect_empty();
  return c;
}

// The launcher's world size (ddprun's, torchrun's, mpirun's or srun's
// variables) must be --world-size: say which is wrong.
void check_world_size(const Config& c) {
  const ddp::LaunchInfo launch = ddp::launch_info_from_env();
  if (launch.world_size < 0) {
    throw std::runtime_error(
        "WORLD_SIZE is not set: run one process per rank under a launcher, e.g. "
        "`ddprun --nproc-per-node " + std::to_string(c.world_size) +
        " ddp_bench train ...`, bench/netem, or mpirun -np " + std::to_string(c.world_size));
  }
  if (launch.world_size != c.world_size) {
    throw std::runtime_error("--world-size " + std::to_string(c.world_size) +
                             " but the launcher (" + launch.source + ") started " +
                             std::to_string(launch.world_size) +
                             " ranks: they must be equal (e.g. ddprun --nproc-per-node " +
                             std::to_string(c.world_size) + ")");
  }
}

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

// One iteration's own split, as the bench sees it (ms).
struct Split {
  double zero_grad = 0, forward = 0, backward = 0, step = 0;
};

// Per iteration: the bench's split and DDP's stats (ddp only).
struct Sample {
  double total_ms = 0;
  Split split;
  ddp::IterationStats stats;
  double loss = 0;
};

Json stats_summary(const std::vector<double>& v) {
  Stats s = summarize(v);
  Json j = Json::object();
  j.set("median", s.median).set("min", s.min).set("max", s.max).set("mean", s.mean);
  return j;
}

}  // namespace

int run_train(Args args) {
  const Config cfg = parse(args);
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
  torch::nn::AnyModule ddp_net = make_model(cfg.model);
  torch::nn::AnyModule local_net = make_model(cfg.model);
  const ModelBatch batch = make_batch(cfg.model, static_cast<uint64_t>(cfg.seed + 1 + rank));

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
    if (cfg.print_params) {
      for (size_t i = 0; i < names.size(); ++i) {
        std::string s;
        for (int64_t d : shapes[i]) s += (s.empty() ? "" : ", ") + std::to_string(d);
        std::printf("param %zu %s [%s]\n", i, names[i].c_str(), s.c_str());
      }
    }
  }

  ddp::DistributedDataParallel model{nullptr};
  std::unique_ptr<torch::optim::SGD> ddp_opt;
  if (has("ddp")) {
    model = ddp::DistributedDataParallel(
        ddp_net, ddp::DistributedDataParallelOptions()
                     .process_group(pg)
                     .bucket_cap_mb(cfg.bucket_cap_mb)
                     .first_bucket_cap_mb(cfg.first_bucket_cap_mb)
                     .overlap_communication(cfg.overlap));
    if (cfg.hook == "fp16") {
      model->register_comm_hook(pg, ddp::fp16_compress_hook);
    } else if (cfg.hook == "bf16") {
      model->register_comm_hook(pg, ddp::bf16_compress_hook);
    } else if (cfg.hook.rfind("powersgd", 0) == 0) {
      model->register_comm_hook(ddp::PowerSGDState(pg, cfg.hook.back() - '0', 2),
                                ddp::powerSGD_hook);
    } else if (cfg.hook == "batched_powersgd1") {
      model->register_comm_hook(ddp::PowerSGDState(pg, 1, 2), ddp::batched_powerSGD_hook);
    }
    ddp_opt = std::make_unique<torch::optim::SGD>(model->parameters(),
                                                  torch::optim::SGDOptions(cfg.lr));
  }
  torch::optim::SGD local_opt(local_net.ptr()->parameters(), torch::optim::SGDOptions(cfg.lr));

  // --timeline: rank 0 keeps the timed DDP iterations' timelines.
  Timeline timeline;
  bool record_timeline = false;

  at::Tensor sync = torch::zeros({1});
  at::Tensor flat = torch::zeros({elements});
  std::vector<at::Tensor> bucket_tensors;  // filled after DDP's first iterations

  // One timed sample of measurement `impl`.
  auto run_one = [&](const std::string& impl) {
    pg->allreduce(sync)->wait();  // start together
    Sample s;
    const auto t0 = Clock::now();
    if (impl == "ddp" || impl == "local") {
      const bool d = impl == "ddp";
      torch::optim::SGD& opt = d ? *ddp_opt : local_opt;
      if (d && record_timeline) timeline.begin_iteration();
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
        if (d && !last) no_sync.emplace(*model);
        torch::Tensor out = d ? model->forward(batch.input) : local_net.forward<torch::Tensor>(batch.input);
        loss = model_loss(cfg.model, out, batch.target);
        t2 = Clock::now();
        loss.backward();
        t3 = Clock::now();
        forward_ms += ms_between(f0, t2);
        backward_ms += ms_between(t2, t3);
        if (d && record_timeline) {
          timeline.add("compute", "forward", f0, t2);
          if (!last) timeline.add("compute", "backward (no_sync)", t2, t3);
        }
      }
      opt.step();
      const auto t4 = Clock::now();
      s.total_ms = ms_between(t0, t4);
      s.split = Split{ms_between(t0, t1), forward_ms, backward_ms, ms_between(t3, t4)};
      s.loss = loss.item<double>();
      if (d) s.stats = model->stats();
      if (d && record_timeline) {
        add_ddp_backward(timeline, s.stats, t3);
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
  std::map<std::string, std::vector<Sample>> samples;
  std::vector<std::vector<std::string>> phases(2);
  for (const auto& impl : cfg.impls) {
    phases[impl == "ddp" || impl == "local" ? 0 : 1].push_back(impl);
  }
  const int64_t rounds = cfg.warmup + cfg.iters;
  // Bytes sent on the link during phase 0's timed iterations (ddp and local;
  // run with --impls ddp to count DDP alone), per timed iteration.
  double tx_start = -1, tx_per_iter = -1;
  for (const auto& order : phases) {
    if (order.empty()) continue;
    if (std::find(order.begin(), order.end(), "allreduce_buckets") != order.end()) {
      for (int64_t b : model->stats().bucket_bytes) bucket_tensors.push_back(torch::zeros({b / 4}));
    }
    for (int64_t it = 0; it < rounds; ++it) {
      if (&order == &phases[0] && it == cfg.warmup) tx_start = tx_bytes_now();
      record_timeline = cfg.timeline && rank == 0 && &order == &phases[0] && it >= cfg.warmup;
      std::vector<std::string> this_round = order;
      if (it % 2) std::reverse(this_round.begin(), this_round.end());
      for (const auto& impl : this_round) {
        Sample s = run_one(impl);
        if (it >= cfg.warmup) samples[impl].push_back(s);
        else samples[impl + "/warmup"].push_back(s);
      }
      if (&order == &phases[0] && it + 1 == rounds && tx_start >= 0) {
        const double end = tx_bytes_now();
        if (end >= 0) tx_per_iter = (end - tx_start) / static_cast<double>(cfg.iters);
      }
      if (rank == 0 && (it + 1 == cfg.warmup || (it >= cfg.warmup && (it - cfg.warmup + 1) % 5 == 0))) {
        std::string line;
        for (const auto& impl : order) {
          const auto& v = samples[it < cfg.warmup ? impl + "/warmup" : impl];
          if (!v.empty()) line += "  " + impl + " " + format_fixed(v.back().total_ms, 1) + " ms";
        }
        std::fprintf(stderr, "train: %s %lld/%lld:%s\n", it < cfg.warmup ? "warm-up" : "iteration",
                     static_cast<long long>(it < cfg.warmup ? it + 1 : it - cfg.warmup + 1),
                     static_cast<long long>(it < cfg.warmup ? cfg.warmup : cfg.iters), line.c_str());
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

  // --- report (rank 0) ----------------------------------------------------
  auto median_of = [&](const std::string& impl) { return summarize(slowest[impl]).median; };
  const double limit =
      has("local") && has("allreduce") ? std::max(median_of("local"), median_of("allreduce")) : 0;

  std::vector<std::vector<std::string>> table;
  Json rows = Json::array();
  for (const auto& impl : cfg.impls) {
    const auto& v = samples[impl];
    Stats st = summarize(slowest[impl]);
    std::vector<std::string> line{impl, format_fixed(st.median, 1),
                                  format_fixed(st.min, 1) + "–" + format_fixed(st.max, 1)};
    Json row = Json::object();
    row.set("impl", impl).set("model", cfg.model.name).set("world_size", world);
    row.set("median_ms", st.median).set("min_ms", st.min).set("max_ms", st.max);
    row.set("mean_ms", st.mean).set("iters", static_cast<int64_t>(v.size()));
    Json raw = Json::array();
    for (double x : slowest[impl]) raw.push(x);
    row.set("samples_ms", std::move(raw));
    if (impl == "ddp" || impl == "local") {
      std::vector<double> zg, fw, bw, stp;
      for (const auto& s : v) {
        zg.push_back(s.split.zero_grad);
        fw.push_back(s.split.forward);
        bw.push_back(s.split.backward);
        stp.push_back(s.split.step);
      }
      Json split = Json::object();
      split.set("zero_grad_ms", stats_summary(zg)).set("forward_ms", stats_summary(fw));
      split.set("backward_ms", stats_summary(bw)).set("step_ms", stats_summary(stp));
      row.set("rank0_split", std::move(split));
      line.push_back(format_fixed(summarize(fw).median, 1));
      line.push_back(format_fixed(summarize(bw).median, 1));
      line.push_back(format_fixed(summarize(stp).median, 1));
      const auto& w = samples[impl + "/warmup"];
      row.set("first_loss", w.empty() ? v.front().loss : w.front().loss);
      row.set("last_loss", v.back().loss);
    } else {
      line.insert(line.end(), {"", "", ""});
    }
    if (impl == "ddp") {
      std::vector<double> f, bc, cm, ov, fin;
      for (const auto& s : v) {
        f.push_back(s.stats.forward_ms);
        bc.push_back(s.stats.backward_compute_ms);
        cm.push_back(s.stats.communication_ms);
        ov.push_back(s.stats.overlapped_ms);
        fin.push_back(s.stats.finalize_ms);
      }
      row.set("forward_ms", summarize(f).median);
      row.set("backward_compute_ms", summarize(bc).median);
      row.set("communication_ms", summarize(cm).median);
      row.set("overlap_ms", summarize(ov).median);
      row.set("finalize_ms", summarize(fin).median);
      Json per_iter = Json::object();
      auto arr = [](const std::vector<double>& x) {
        Json a = Json::array();
        for (double d : x) a.push(d);
        return a;
      };
      per_iter.set("forward_ms", arr(f)).set("backward_compute_ms", arr(bc));
      per_iter.set("communication_ms", arr(cm)).set("overlap_ms", arr(ov));
      per_iter.set("finalize_ms", arr(fin));
      row.set("stats_rank0", std::move(per_iter));
      Json buckets = Json::array();
      for (int64_t b : v.back().stats.bucket_bytes) buckets.push(b);
      row.set("bucket_bytes", std::move(buckets));
      row.set("hook", cfg.hook);
      if (cfg.timeline) row.set("timeline", timeline.to_json());
      if (std::all_of(tx_ranks.begin(), tx_ranks.end(), [](double x) { return x >= 0; })) {
        Json tx = Json::array();
        double sum = 0;
        for (double x : tx_ranks) {
          tx.push(x);
          sum += x;
        }
        row.set("tx_bytes_per_iter_ranks", std::move(tx));
        row.set("tx_bytes_per_iter", sum / static_cast<double>(tx_ranks.size()));
      }
      line.push_back(format_fixed(summarize(f).median, 1) + " / " +
                     format_fixed(summarize(bc).median, 1) + " / " +
                     format_fixed(summarize(cm).median, 1) + " / " +
                     format_fixed(summarize(ov).median, 1) + " / " +
                     format_fixed(summarize(fin).median, 1));
      if (limit > 0) {
        row.set("limit_ms", limit).set("efficiency", limit / st.median);
        line.push_back(format_fixed(limit / st.median, 3));
      }
    }
    table.push_back(line);
    rows.push(std::move(row));
  }

  std::printf("train %s, %d ranks, %zu parameters (%lld elements, %.1f MiB); %s\n\n%s",
              describe(cfg.model).c_str(), world, names.size(),
              static_cast<long long>(elements), grad_bytes / 1048576.0,
              machine_summary(torch_version).c_str(),
              markdown_table({"measurement", "median ms", "min–max ms", "fwd ms (rank 0)",
                              "bwd ms (rank 0)", "step ms (rank 0)",
                              "DDP stats fwd / bwd compute / comm / overlap / finalize ms",
                              "efficiency"},
                             table, {false, true, true, true, true, true, true, true})
                  .c_str());
  if (limit > 0) {
    std::printf("\nlimit = max(local %.1f, allreduce %.1f) = %.1f ms\n", median_of("local"),
                median_of("allreduce"), limit);
  }
  std::fflush(stdout);

  if (!cfg.json_path.empty()) {
    Json config = Json::object();
    config.set("model", cfg.model.name).set("world_size", world).set("batch_per_rank", cfg.model.batch);
    config.set("image_size", cfg.model.image_size).set("seq_len", cfg.model.seq_len);
    config.set("model_description", describe(cfg.model));
    config.set("process_groups", cfg.process_groups).set("sync_every", cfg.sync_every);
    config.set("bucket_cap_mb", cfg.bucket_cap_mb).set("first_bucket_cap_mb", cfg.first_bucket_cap_mb);
    config.set("iters", cfg.iters).set("warmup", cfg.warmup).set("lr", cfg.lr);
    config.set("seed", cfg.seed).set("intra_op_threads", cfg.threads);
    config.set("openblas_threads", blas_threads);
    config.set("gloo_threads", cfg.gloo_threads).set("overlap", cfg.overlap);
    config.set("hook", cfg.hook);
    config.set("method",
               "two phases, ddp+local then allreduce+allreduce_buckets, each interleaved by "
               "iteration (order reversed every other iteration); an untimed "
               "1-element allreduce before each sample; a sample's time is the slowest rank's; "
               "iteration = zero_grad + sync_every x (forward + loss + backward, all but the "
               "last under no_sync) + SGD step");
    Json params = Json::object();
    params.set("count", static_cast<int64_t>(names.size())).set("elements", elements);
    Json list = Json::array();
    for (size_t i = 0; i < names.size(); ++i) {
      std::string s = names[i] + " [";
      for (size_t d = 0; d < shapes[i].size(); ++d) s += (d ? ", " : "") + std::to_string(shapes[i][d]);
      list.push(s + "]");
    }
    params.set("list", std::move(list));
    Json out = Json::object();
    out.set("benchmark", "train").set("side", "ddp");
    if (!cfg.tag.empty()) out.set("tag", cfg.tag);
    out.set("machine", describe_machine(torch_version));
    out.set("config", std::move(config));
    out.set("parameters", std::move(params));
    out.set("rows", std::move(rows));
    write_file(cfg.json_path, out.dump());
    std::fprintf(stderr, "train: wrote %s\n", cfg.json_path.c_str());
  }
  return 0;
}

}  // namespace ddp_bench
