// `paper_bench converge`: training loss against micro-batch on a real small
// task, with gradients synchronized every K micro-batches (no_sync on the
// others): the paper's Fig. 11 experiment, on scikit-learn's "digits" (1797
// real 8x8 handwritten digits). experiments/paper/pytorch_converge.py is its twin on
// PyTorch's DDP: same data, same order, same model, same initial weights,
// same arithmetic, so for equal K the two loss curves should agree to float32
// rounding (K = 1: bit for bit here, same kernels).
//
// Method. Features / 16; rows [0, 1500) train, the rest held out. The order
// of training samples is a stream of epochs, each a Fisher-Yates shuffle of
// 0..1499 (from the identity) driven by splitmix64 from state --seed, the
// stream continuing across epochs: no torch RNG, so both languages produce
// it exactly. Micro-batch t is stream samples [t*W*B, (t+1)*W*B), rank r's
// slice [r*B, (r+1)*B) of those. Model: torch::manual_seed(seed), then
// Sequential(Linear(64,128), ReLU, Linear(128,128), ReLU, Linear(128,10))
// with libtorch's default init (the same draws as PyTorch's nn.Linear).
// Per micro-batch: forward, cross-entropy (mean over the rank's B), backward;
// the K-th of each group (and the last of the run) outside no_sync, then an
// SGD step and zero_grad; gradients of a group are summed (not divided by K,
// as in the paper) unless --accumulate mean.
// The recorded loss is the rank average (an allreduce of the scalar).
#include "paper_subcommands.h"

#include <ddp/ddp.h>

#include <torch/torch.h>
#include <torch/version.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <optional>
#include <sstream>

namespace ddp_bench {

const char* const kConvergeUsage = R"(usage: paper_bench converge --data DIGITS.csv [options]
Run once per rank under a launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT, e.g.
  experiments/paper/evaluate.py digits /tmp/digits.csv
  ddprun --nproc-per-node 2 -- build/experiments/paper/paper_bench converge --data /tmp/digits.csv \
      --sync-every 1,2,4,8 --json converge_ddp.json
Trains a 3-layer MLP on scikit-learn's "digits" with DistributedDataParallel,
synchronizing gradients every K micro-batches (the others under no_sync), for
each K given, each from the same initial weights; records the rank-averaged
loss of every micro-batch and the held-out accuracy at the end.
experiments/paper/pytorch_converge.py does the same with PyTorch's DDP (same options);
`experiments/paper/pytorch_converge.py --compare A.json B.json` compares the curves.

options:
  --data PATH          the digits as plain CSV (64 pixels 0..16, then the
                       label, per row): experiments/paper/evaluate.py digits writes it
  --sync-every LIST    values of K, run one after the other (default 1,2,4,8)
  --steps N            micro-batches per run (default 400)
  --batch B            samples per rank per micro-batch (default 16)
  --lr R               SGD learning rate (default 0.05)
  --momentum M         SGD momentum (default 0)
  --accumulate HOW     sum (default, as the paper) or mean of a group's
                       gradients (each micro-batch's loss divided by K before
                       backward; the recorded loss is not)
  --seed S             weights (torch::manual_seed) and sample order (default 0)
  --threads T          intra-op threads per rank (default 1)
  --json PATH          rank 0 writes the curves there
)";

namespace {

constexpr int64_t kFeatures = 64;
constexpr int64_t kClasses = 10;
constexpr int64_t kTrainRows = 1500;

struct Config {
  std::string data;
  std::vector<int64_t> sync_every{1, 2, 4, 8};
  int64_t steps = 400;
  int64_t batch = 16;
  double lr = 0.05;
  double momentum = 0;
  std::string accumulate = "sum";
  int64_t seed = 0;
  int64_t threads = 1;
  std::string json_path;
};

Config parse(Args& args) {
  Config c;
  c.data = args.take("--data").value_or("");
  if (c.data.empty()) {
    throw UsageError(
        "--data is required: the digits CSV "
        "(experiments/paper/evaluate.py digits /tmp/digits.csv)");
  }
  if (auto list = args.take("--sync-every")) {
    c.sync_every.clear();
    std::stringstream in(*list);
    std::string item;
    while (std::getline(in, item, ',')) {
      char* end = nullptr;
      const long long k = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || k < 1 || k > 1000000) {
        throw UsageError(
            "--sync-every takes positive integers separated by commas (e.g. 1,2,4,8), "
            "not '" +
            *list + "'");
      }
      c.sync_every.push_back(k);
    }
    if (c.sync_every.empty()) throw UsageError("--sync-every is empty");
  }
  c.steps = args.take_int("--steps", 1, 100000000).value_or(c.steps);
  c.batch = args.take_int("--batch", 1, 1 << 20).value_or(c.batch);
  c.lr = args.take_double("--lr", 0.0).value_or(c.lr);
  c.momentum = args.take_double("--momentum", 0.0).value_or(c.momentum);
  c.accumulate = args.take("--accumulate").value_or(c.accumulate);
  if (c.accumulate != "sum" && c.accumulate != "mean") {
    throw UsageError("--accumulate is sum or mean, not '" + c.accumulate + "'");
  }
  c.seed = args.take_int("--seed", 0, INT64_MAX).value_or(c.seed);
  c.threads = args.take_int("--threads", 1, 1024).value_or(c.threads);
  c.json_path = args.take("--json").value_or("");
  args.expect_empty();
  return c;
}

struct Digits {
  torch::Tensor train_x, train_y, test_x, test_y;  // float32 [n, 64] in [0, 1]; int64 [n]
};

Digits load_digits(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error("cannot read --data " + path +
                             ": write it with experiments/paper/evaluate.py digits "
                             "(needs python3-sklearn)");
  }
  std::vector<float> x;
  std::vector<int64_t> y;
  std::string line;
  int64_t row = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++row;
    std::stringstream fields(line);
    std::string field;
    std::vector<double> v;
    while (std::getline(fields, field, ',')) {
      char* end = nullptr;
      v.push_back(std::strtod(field.c_str(), &end));
      if (field.empty() || (*end != '\0' && *end != '\r')) {
        throw std::runtime_error(path + " row " + std::to_string(row) + ": '" + field +
                                 "' is not a number");
      }
    }
    if (static_cast<int64_t>(v.size()) != kFeatures + 1) {
      throw std::runtime_error(path + " row " + std::to_string(row) + ": " +
                               std::to_string(v.size()) +
                               " fields, expected 65 (64 pixels, label)");
    }
    const double label = v.back();
    if (label < 0 || label >= kClasses || label != static_cast<int64_t>(label)) {
      throw std::runtime_error(path + " row " + std::to_string(row) + ": label " +
                               std::to_string(label) + " is not one of 0..9");
    }
    for (int64_t i = 0; i < kFeatures; ++i) x.push_back(static_cast<float>(v[i] / 16.0));
    y.push_back(static_cast<int64_t>(label));
  }
  const int64_t n = static_cast<int64_t>(y.size());
  if (n <= kTrainRows) {
    throw std::runtime_error(path + " has " + std::to_string(n) + " rows, expected more than " +
                             std::to_string(kTrainRows) + " (the digits have 1797)");
  }
  auto all_x = torch::from_blob(x.data(), {n, kFeatures}, torch::kFloat32).clone();
  auto all_y = torch::from_blob(y.data(), {n}, torch::kInt64).clone();
  return {all_x.slice(0, 0, kTrainRows), all_y.slice(0, 0, kTrainRows), all_x.slice(0, kTrainRows),
          all_y.slice(0, kTrainRows)};
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The first `count` samples of the stream of shuffled epochs (see the top).
std::vector<int64_t> sample_stream(uint64_t seed, int64_t n, int64_t count) {
  std::vector<int64_t> out, perm(n);
  out.reserve(count);
  uint64_t state = seed;
  while (static_cast<int64_t>(out.size()) < count) {
    std::iota(perm.begin(), perm.end(), int64_t{0});
    for (int64_t i = n - 1; i > 0; --i) {
      std::swap(perm[i], perm[splitmix64(state) % static_cast<uint64_t>(i + 1)]);
    }
    for (int64_t i = 0; i < n && static_cast<int64_t>(out.size()) < count; ++i)
      out.push_back(perm[i]);
  }
  return out;
}

torch::nn::Sequential make_mlp(int64_t seed) {
  // One layer after another: the draws of a Sequential(Linear(..), ...)
  // constructor call would come in the compiler's argument order (GCC's:
  // right to left), not PyTorch's.
  torch::manual_seed(static_cast<uint64_t>(seed));
  torch::nn::Sequential net;
  net->push_back(torch::nn::Linear(kFeatures, 128));
  net->push_back(torch::nn::ReLU());
  net->push_back(torch::nn::Linear(128, 128));
  net->push_back(torch::nn::ReLU());
  net->push_back(torch::nn::Linear(128, kClasses));
  return net;
}

// FNV-1a (64 bit) of a float32 tensor's bytes: equal hashes, equal weights.
std::string fnv1a64(const torch::Tensor& t) {
  auto c = t.detach().contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, h);
  return buf;
}

int64_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

struct Run {
  int64_t sync_every = 1;
  std::vector<float> loss;
  double accuracy = 0, test_loss = 0, wall_s = 0;
};

}  // namespace

int run_converge(Args args) {
  const Config cfg = parse(args);
  torch::set_num_threads(static_cast<int>(cfg.threads));
  const int blas_threads = limit_openblas_threads(static_cast<int>(cfg.threads));
  const Digits data = load_digits(cfg.data);

  ddp::ProcessGroupPtr pg = ddp::init_process_group();
  const int rank = pg->rank(), world = pg->size();
  const std::string torch_version = TORCH_VERSION;
  const int64_t global = world * cfg.batch;
  const auto stream =
      sample_stream(static_cast<uint64_t>(cfg.seed), kTrainRows, cfg.steps * global);

  // The initial weights, as PyTorch's side prints them.
  Json params = Json::array();
  {
    auto net = make_mlp(cfg.seed);
    for (const auto& item : net->named_parameters()) {
      const auto& t = item.value();
      const double sum = t.to(torch::kFloat64).sum().item<double>();
      const std::string hash = fnv1a64(t);
      std::string shape;
      for (auto d : t.sizes()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      if (rank == 0) {
        std::fprintf(stderr, "converge: init %-8s [%s] sum %.17g fnv1a64 %s\n", item.key().c_str(),
                     shape.c_str(), sum, hash.c_str());
      }
      Json p = Json::object();
      p.set("name", item.key())
          .set("shape", "[" + shape + "]")
          .set("sum", sum)
          .set("fnv1a64", hash);
      params.push(std::move(p));
    }
  }

  std::vector<Run> runs;
  for (const int64_t k : cfg.sync_every) {
    const auto start = Clock::now();
    Run run;
    run.sync_every = k;
    auto net = make_mlp(cfg.seed);
    ddp::DistributedDataParallel model(net,
                                       ddp::DistributedDataParallelOptions().process_group(pg));
    torch::optim::SGD opt(model->parameters(),
                          torch::optim::SGDOptions(cfg.lr).momentum(cfg.momentum));
    opt.zero_grad();
    for (int64_t t = 0; t < cfg.steps; ++t) {
      const bool sync = (t + 1) % k == 0 || t + 1 == cfg.steps;
      const int64_t first = t * global + rank * cfg.batch;
      auto index = torch::tensor(
          std::vector<int64_t>(stream.begin() + first, stream.begin() + first + cfg.batch));
      auto x = data.train_x.index_select(0, index);
      auto y = data.train_y.index_select(0, index);
      torch::Tensor loss;
      {
        std::optional<ddp::NoSyncGuard> no_sync;
        if (!sync) no_sync.emplace(*model);
        loss = torch::nn::functional::cross_entropy(model->forward(x), y);
        (cfg.accumulate == "mean" ? loss / k : loss).backward();
      }
      auto mean = loss.detach().clone();
      pg->allreduce(mean)->wait();
      mean.div_(world);
      run.loss.push_back(mean.item<float>());
      if (sync) {
        opt.step();
        opt.zero_grad();
      }
      if (rank == 0 && ((t + 1) % 100 == 0 || t + 1 == cfg.steps)) {
        std::fprintf(stderr, "converge: K=%lld micro-batch %lld/%lld loss %.4f\n",
                     static_cast<long long>(k), static_cast<long long>(t + 1),
                     static_cast<long long>(cfg.steps), run.loss.back());
      }
    }
    {
      torch::NoGradGuard no_grad;
      auto logits = net->forward(data.test_x);
      run.test_loss = torch::nn::functional::cross_entropy(logits, data.test_y).item<double>();
      run.accuracy = logits.argmax(1).eq(data.test_y).sum().item<int64_t>() /
                     static_cast<double>(data.test_y.size(0));
    }
    run.wall_s = micros_between(start, Clock::now()) / 1e6;
    runs.push_back(std::move(run));
  }
  pg->barrier()->wait();
  if (rank != 0) return 0;

  std::vector<std::vector<std::string>> table;
  for (const auto& r : runs) {
    const size_t tail = std::min<size_t>(20, r.loss.size());
    double last = 0;
    for (size_t i = r.loss.size() - tail; i < r.loss.size(); ++i) last += r.loss[i];
    table.push_back({std::to_string(r.sync_every), format_fixed(r.loss.front(), 4),
                     format_fixed(last / tail, 4), format_fixed(r.test_loss, 4),
                     format_fixed(100 * r.accuracy, 1), format_fixed(r.wall_s, 1)});
  }
  std::printf(
      "converge (ddp): digits, MLP 64-128-128-10, %d ranks x %lld samples, %lld "
      "micro-batches, SGD lr %g momentum %g, accumulate %s; %s\n\n%s",
      world, static_cast<long long>(cfg.batch), static_cast<long long>(cfg.steps), cfg.lr,
      cfg.momentum, cfg.accumulate.c_str(), machine_summary(torch_version).c_str(),
      markdown_table({"sync every", "first loss", "loss (last 20)", "held-out loss",
                      "held-out accuracy %", "wall s"},
                     table, {true, true, true, true, true, true})
          .c_str());
  std::fflush(stdout);

  if (!cfg.json_path.empty()) {
    Json config = Json::object();
    config.set("data", cfg.data)
        .set("train_rows", kTrainRows)
        .set("test_rows", data.test_y.size(0))
        .set("world_size", world)
        .set("batch_per_rank", cfg.batch)
        .set("steps", cfg.steps)
        .set("lr", cfg.lr)
        .set("momentum", cfg.momentum)
        .set("accumulate", cfg.accumulate)
        .set("seed", cfg.seed);
    Json ks = Json::array();
    for (auto k : cfg.sync_every) ks.push(k);
    config.set("sync_every", std::move(ks));
    config.set("model", "Sequential(Linear(64,128), ReLU, Linear(128,128), ReLU, Linear(128,10))");
    config.set("method",
               "features/16; rows [0,1500) train, the rest held out; order: epochs of "
               "Fisher-Yates shuffles driven by splitmix64 from state seed; micro-batch t = stream "
               "[t*W*B, (t+1)*W*B), rank r's slice [r*B, (r+1)*B); cross-entropy (mean over B); "
               "the K-th micro-batch of a group (and the last) synced, the others under no_sync, "
               "gradients summed (accumulate sum) or each loss divided by K before backward "
               "(accumulate mean), then SGD step and zero_grad; loss = "
               "allreduced mean over ranks of each micro-batch's loss");
    config.set("intra_op_threads", cfg.threads).set("openblas_threads", blas_threads);
    config.set("backend", "gloo");
    Json out_runs = Json::array();
    for (const auto& r : runs) {
      Json loss = Json::array(), bits = Json::array();
      for (float l : r.loss) {
        loss.push(static_cast<double>(l));
        bits.push(f32_bits(l));
      }
      Json j = Json::object();
      j.set("sync_every", r.sync_every).set("loss", std::move(loss));
      j.set("loss_f32_bits", std::move(bits));
      j.set("accuracy", r.accuracy).set("test_loss", r.test_loss).set("wall_s", r.wall_s);
      out_runs.push(std::move(j));
    }
    Json out = Json::object();
    out.set("benchmark", "converge").set("side", "ddp");
    add_machine_and_config(out, torch_version, std::move(config));
    out.set("parameters", std::move(params));
    out.set("runs", std::move(out_runs));
    write_result("converge", cfg.json_path, out);
  }
  return 0;
}

}  // namespace ddp_bench
