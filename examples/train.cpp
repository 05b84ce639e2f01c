// The README's main job: a classifier trained with DistributedDataParallel,
// one process per rank.
//
//   ddprun --nproc-per-node 2 build/examples/train [flags]
//
// Data: Fashion-MNIST from Debian's dataset-fashion-mnist (examples/
// fashion_mnist.h) with a small CNN; where the package is absent, or with
// --data synthetic, a deterministic synthetic 10-class set
// (examples/synthetic_dataset.h) with an MLP; or MNIST with --mnist DIR
// (the four ubyte files). Every rank sees a
// different shard (libtorch's DistributedRandomSampler, reshuffled per epoch).
// Rank 0 prints progress (loss averaged over all ranks, global samples/s and
// DDP's own statistics), then loss and accuracy on the held-out split, and
// saves the trained module.
//
// With --elastic the same training runs through ddp::ElasticRunner (under
// `ddprun --elastic MIN:MAX`): a rank that dies is left behind and the
// others go on from the last step, in process; a rank that starts later
// joins.
//
// With --checkpoint-every N the job survives failures: every N steps it saves
// a snapshot of the whole training state (ddp::save_checkpoint) and at start
// resumes from it when it exists, exactly where it was (the same samples in
// the same order, the same random streams), e.g. under
// `ddprun --max-restarts 3`.
#include "fashion_mnist.h"
#include "synthetic_dataset.h"
#include "train_device.h"
#include "train_flags.h"

#include <ddp/ddp.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <unistd.h>

namespace {

using train::Flags;

// The classifier, log-probabilities out. An MLP (flatten, two hidden ReLU
// layers) for the synthetic set and MNIST; for Fashion-MNIST a small CNN:
// two 5x5 convolutions of 8 and 16 channels, each followed by ReLU and 2x2
// max-pooling, then one hidden ReLU layer. Dropout after each hidden layer
// in training when `dropout` > 0.
struct NetImpl : torch::nn::Module {
  enum class Kind { MLP, CNN };
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  const Kind kind;
  const int64_t side, hidden, classes;
  const double dropout;
  NetImpl(Kind kind, int64_t side, int64_t hidden, int64_t classes, double dropout = 0)
      : kind(kind), side(side), hidden(hidden), classes(classes), dropout(dropout) {
    using torch::nn::Conv2d, torch::nn::Conv2dOptions, torch::nn::Linear;
    if (kind == Kind::CNN) {
      conv1 = register_module("conv1", Conv2d(Conv2dOptions(1, 8, 5)));
      conv2 = register_module("conv2", Conv2d(Conv2dOptions(8, 16, 5)));
      const int64_t s = ((side - 4) / 2 - 4) / 2;  // what is left of a side: 28 -> 4
      fc1 = register_module("fc1", Linear(16 * s * s, hidden));
    } else {
      fc1 = register_module("fc1", Linear(side * side, hidden));
      fc2 = register_module("fc2", Linear(hidden, hidden));
    }
    fc3 = register_module("fc3", Linear(hidden, classes));
  }
  torch::Tensor forward(torch::Tensor x) {
    if (kind == Kind::CNN) {
      x = torch::max_pool2d(torch::relu(conv1(x)), 2);
      x = torch::max_pool2d(torch::relu(conv2(x)), 2);
      x = drop(torch::relu(fc1(x.flatten(1))));
    } else {
      x = drop(torch::relu(fc1(x.flatten(1))));
      x = drop(torch::relu(fc2(x)));
    }
    return torch::log_softmax(fc3(x), 1);
  }
  torch::Tensor drop(torch::Tensor x) {
    return dropout > 0 ? torch::dropout(x, dropout, is_training()) : x;
  }
  const char* architecture() const { return kind == Kind::CNN ? "CNN" : "MLP"; }
};
TORCH_MODULE(Net);

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// --mixed-precision as DDP's option (none without the flag).
std::optional<ddp::MixedPrecision> mixed_precision_option(const Flags& f) {
  if (f.mixed_precision.empty()) return std::nullopt;
  return train::mixed_precision_of(f.mixed_precision);
}

// Sums `values` over all ranks (float64).
std::vector<double> sum_over_ranks(ddp::ProcessGroup& pg, std::vector<double> values) {
  auto t = torch::tensor(values, torch::kDouble);
  pg.allreduce(t)->wait();
  return {t.data_ptr<double>(), t.data_ptr<double>() + t.numel()};
}

// DDP's per-iteration statistics, averaged over a logging window.
struct StatsWindow {
  double forward = 0, backward = 0, comm = 0, overlapped = 0;
  int64_t n = 0;
  size_t buckets = 0;
  void add(const ddp::IterationStats& s) {
    forward += s.forward_ms;
    backward += s.backward_compute_ms;
    comm += s.communication_ms;
    overlapped += s.overlapped_ms;
    buckets = s.bucket_count();
    ++n;
  }
  std::string line() const {
    const double k = n ? 1.0 / n : 0;
    char out[200];
    std::snprintf(out, sizeof(out),
                  "ddp: fwd %.2f ms, bwd %.2f ms, comm %.2f ms (%.2f overlapped, %.0f%%), "
                  "%zu buckets",
                  forward * k, backward * k, comm * k, overlapped * k,
                  comm > 0 ? 100 * overlapped / comm : 0.0, buckets);
    return out;
  }
};

// Loss and accuracy of `net` over this rank's contiguous part of the test
// set, summed over all ranks.
std::pair<double, double> evaluate(ddp::ProcessGroup& pg, Net& net, const torch::Tensor& images,
                                   const torch::Tensor& targets) {
  torch::NoGradGuard no_grad;
  net->eval();
  const int64_t n = images.size(0), ranks = pg.size(), rank = pg.rank();
  const int64_t begin = n * rank / ranks, end = n * (rank + 1) / ranks;
  double loss = 0, correct = 0;
  for (int64_t at = begin; at < end; at += 1000) {
    const int64_t len = std::min<int64_t>(1000, end - at);
    auto out = net->forward(images.narrow(0, at, len));
    auto y = targets.narrow(0, at, len);
    loss += torch::nll_loss(out, y, {}, at::Reduction::Sum).item<double>();
    correct += out.argmax(1).eq(y).sum().item<double>();
  }
  net->train();
  auto total = sum_over_ranks(pg, {loss, correct});
  return {total[0] / n, total[1] / n};
}

// Fashion-MNIST's directory when every rank has it, std::nullopt when no
// rank does (the package is absent: synthetic data). Every rank looks, then
// they compare, so that they never train different models: a rank whose
// files are bad raises its DataError, the others one that points to it; a
// package installed on some hosts only is an error on every rank.
std::optional<std::string> fashion_mnist_on_every_rank(ddp::ProcessGroup& pg,
                                                       const std::string& dir) {
  std::optional<std::string> found;
  std::string error;
  try {
    found = train::unpack_fashion_mnist(dir);
  } catch (const train::DataError& e) {
    error = e.what();
  }
  // How many ranks failed, found it, lack it.
  auto counts = sum_over_ranks(
      pg, {error.empty() ? 0.0 : 1.0, found ? 1.0 : 0.0, !found && error.empty() ? 1.0 : 0.0});
  if (!error.empty()) throw train::DataError(error);
  if (counts[0] > 0) {
    throw train::DataError(std::to_string(static_cast<int>(counts[0])) +
                           " rank(s) could not read Fashion-MNIST from " + dir +
                           ": see their errors");
  }
  if (counts[1] > 0 && counts[2] > 0) {
    throw train::DataError("Fashion-MNIST is in " + dir + " for " +
                           std::to_string(static_cast<int>(counts[1])) + " rank(s) but not for " +
                           std::to_string(static_cast<int>(counts[2])) +
                           ": install dataset-fashion-mnist on every host, or pass --data "
                           "synthetic");
  }
  return found;
}

// FNV-1a 64 over the parameters' bytes: equal hashes, bit-identical models
// (what the checkpoint test compares between an interrupted and a clean run).
uint64_t parameters_hash(const std::vector<torch::Tensor>& parameters) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const auto& p : parameters) {
    const auto t = p.detach().to(torch::kCPU).contiguous();
    const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
    for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ bytes[i]) * 0x100000001b3ULL;
  }
  return h;
}

// The loader's batches: the examples stacked and put on the training device
// in the model's dtype (the targets on the device too), so that the loop
// never copies.
using Example = torch::data::Example<>;
using OntoDevice = torch::data::transforms::BatchLambda<std::vector<Example>, Example>;
OntoDevice stacked_onto(torch::Device device, torch::Dtype dtype) {
  return OntoDevice([device, dtype](std::vector<Example> examples) {
    Example batch = torch::data::transforms::Stack<>().apply_batch(std::move(examples));
    return Example{batch.data.to(device, dtype), batch.target.to(device)};
  });
}

// --compress as the hook's options (the flag was checked by train::parse).
ddp::AdaptiveCompressionOptions compression_options(const Flags& f) {
  auto options = ddp::AdaptiveCompressionOptions().window(f.compress_window);
  if (f.compress == "adaptive") return options;
  std::vector<ddp::CompressionLevel> levels;
  for (const auto& level : train::compression_ladder(f.compress)) {
    if (level == "full") levels.push_back(ddp::CompressionLevel::full());
    if (level == "fp16") levels.push_back(ddp::CompressionLevel::fp16());
    if (level == "bf16") levels.push_back(ddp::CompressionLevel::bf16());
    if (level.rfind("powersgd:", 0) == 0) {
      levels.push_back(ddp::CompressionLevel::powerSGD(std::stoll(level.substr(9))));
    }
  }
  return options.levels(levels);
}

// One line of what --compress sent: bytes, levels used, switches.
std::string compression_summary(const ddp::AdaptiveCompressionState& state) {
  const auto stats = state.stats();
  const auto& levels = state.options().levels();
  std::string text = "sent " + std::to_string(stats.bytes_sent) + " bytes of " +
                     std::to_string(stats.bytes_uncompressed) + " (" +
                     std::to_string(stats.sent_fraction()) + " of full precision); reductions:";
  for (size_t i = 0; i < levels.size(); ++i) {
    text += (i ? ", " : " ") + levels[i].name() + " " +
            std::to_string(stats.reductions_per_level[i]);
  }
  int critical = 0;
  for (const auto& change : stats.switches) critical += change.critical ? 1 : 0;
  return text + "; " + std::to_string(stats.switches.size()) + " switches (" +
         std::to_string(critical) + " critical)";
}

// The training loop, for either dataset (`train`: examples of one sample),
// on `where` (train_device.h).
template <typename Dataset>
void run(const Flags& f, const train::DeviceChoice& where,
         const std::shared_ptr<ddp::ProcessGroup>& pg, Dataset train, const std::string& data_name,
         Net net, const torch::Tensor& test_images, const torch::Tensor& test_targets) {
  using torch::data::samplers::DistributedRandomSampler;
  const int rank = pg->rank(), world = pg->size();
  const bool lead = rank == 0;
  const size_t train_size = train.size().value();
  const int64_t per_rank = (static_cast<int64_t>(train_size) + world - 1) / world;
  const int64_t steps_per_epoch = (per_rank + f.batch_size - 1) / f.batch_size;
  const auto dtype = f.float64 ? torch::kDouble : torch::kFloat;
  const torch::Device device = train::device_of(where);

  net->to(device, dtype);
  ddp::DistributedDataParallel model(
      net, ddp::DistributedDataParallelOptions()
               .bucket_cap_mb(f.bucket_cap_mb)
               .first_bucket_cap_mb(std::min(1.0, f.bucket_cap_mb.resolved().mib()))
               .find_unused_parameters(f.find_unused)
               .mixed_precision(mixed_precision_option(f)));
  std::shared_ptr<ddp::AdaptiveCompressionState> compression;
  if (!f.compress.empty()) {
    compression = model->register_comm_hook(
        ddp::AdaptiveCompressionState(compression_options(f).process_group(pg)),
        ddp::adaptive_compression_hook);
  }
  const auto sgd = torch::optim::SGDOptions(f.lr).momentum(0.9);
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  ddp::ZeroRedundancyOptimizer* zero = nullptr;  // with --zero
  if (f.zero) {
    auto sharded = std::make_unique<ddp::ZeroRedundancyOptimizer>(
        model->parameters(), sgd, ddp::ZeroOptions().process_group(pg));
    zero = sharded.get();
    optimizer = std::move(sharded);
  } else {
    optimizer = std::make_unique<torch::optim::SGD>(model->parameters(), sgd);
  }
  torch::optim::Optimizer& opt = *optimizer;
  torch::manual_seed(1000 + rank);  // dropout: every rank its own masks

  if (lead) {
    int64_t params = 0;
    for (const auto& p : model->parameters()) params += p.numel();
    std::printf("train: device %s\n", where.why.c_str());
    std::printf(
        "train: %d ranks, %s: %zu training samples (%lld per rank), %lld held out\n"
        "train: %s with %lld %s parameters, batch %lld per rank (%lld global), "
        "SGD lr %g momentum 0.9%s, %d epochs of %lld steps%s\n",
        world, data_name.c_str(), train_size, static_cast<long long>(per_rank),
        static_cast<long long>(test_images.size(0)), net->architecture(),
        static_cast<long long>(params),
        f.float64                   ? "float64"
        : f.mixed_precision.empty() ? "float32"
                                    : ("float32 (computing in " + f.mixed_precision + ")").c_str(),
        static_cast<long long>(f.batch_size), static_cast<long long>(f.batch_size * world), f.lr,
        f.zero ? " (ZeRO: state sharded)" : "", f.epochs, static_cast<long long>(steps_per_epoch),
        f.uneven ? " at most (--uneven: rank r stops at (100 - 10 r)%)" : "");
    std::fflush(stdout);
  }

  // Where training stands; a snapshot brings it back (with the module, the
  // optimizer and every rank's generator). The epoch's loss sums travel in
  // it too, as totals over the ranks that rank 0 alone takes back, so that
  // the epoch's mean loss is the same as without the interruption.
  ddp::TrainingState state;
  double epoch_loss = 0, epoch_samples = 0;
  if (f.checkpoint_every > 0) {
    if (auto resumed = ddp::load_checkpoint(f.snapshot, *model, opt)) {
      state = *resumed;
      if (lead) {
        if (auto sums = state.extra.find("epoch_loss_sums"); sums != state.extra.end()) {
          epoch_loss = sums->second[0].item<double>();
          epoch_samples = sums->second[1].item<double>();
        }
        std::printf(
            "train: resumed from %s at epoch %lld, step %lld (%lld samples into the "
            "epoch)%s\n",
            f.snapshot.c_str(), static_cast<long long>(state.epoch + 1),
            static_cast<long long>(state.iteration), static_cast<long long>(state.epoch_samples),
            state.epoch >= f.epochs ? ": training is complete" : "");
        std::fflush(stdout);
      }
    }
  }
  auto save_snapshot = [&] {
    auto sums = sum_over_ranks(*pg, {epoch_loss, epoch_samples});
    state.extra["epoch_loss_sums"] = torch::tensor(sums, torch::kDouble);
    ddp::save_checkpoint(f.snapshot, *model, opt, state);
  };

  const auto start = std::chrono::steady_clock::now();
  const int64_t first_step = state.iteration;
  auto window_start = start;
  double window_loss = 0, window_samples = 0;
  double last_epoch_loss = 0;
  StatsWindow stats;
  for (; state.epoch < f.epochs; ++state.epoch, state.epoch_samples = 0) {
    const int epoch = static_cast<int>(state.epoch);
    // A loader owns its sampler, so each epoch gets a new one whose shuffle
    // is seeded by the epoch (the same on every rank: disjoint shards). After
    // a resume it skips what this rank already trained on.
    DistributedRandomSampler shard(train_size, world, rank);
    shard.set_epoch(epoch);
    auto loader = torch::data::make_data_loader(
        train.map(stacked_onto(device, dtype)),
        ddp::ResumingSampler<DistributedRandomSampler>(std::move(shard), state.epoch_samples),
        torch::data::DataLoaderOptions().batch_size(f.batch_size));
    int64_t epoch_step = state.epoch_samples / f.batch_size;
    // --uneven: this rank's share of the epoch's steps; a Join lets the
    // ranks that finished answer the others' collectives, and then brings
    // every replica (parameters and momentum) to the last one's state.
    const int64_t my_steps =
        f.uneven ? steps_per_epoch * std::max(50, 100 - 10 * rank) / 100 : steps_per_epoch;
    // A ZeRO optimizer joins itself: a rank out of steps still steps its shard.
    ddp::OptimizerJoinable joinable_opt(opt, pg);
    ddp::Joinable& opt_joinable = zero ? static_cast<ddp::Joinable&>(*zero) : joinable_opt;
    std::optional<ddp::Join> join;
    if (f.uneven)
      join.emplace(std::vector<std::reference_wrapper<ddp::Joinable>>{*model, opt_joinable});
    const auto epoch_start = std::chrono::steady_clock::now();
    // Every rank takes part (the same steps on each): loss and sample counts
    // over the window and the epoch.
    auto report = [&](bool epoch_end) {
      auto total = sum_over_ranks(*pg, {window_loss, window_samples, epoch_loss, epoch_samples});
      if (lead && total[1] > 0) {
        std::printf("epoch %d/%d step %4lld/%lld | loss %.4f | %6.0f samples/s | %s\n", epoch + 1,
                    f.epochs, static_cast<long long>(epoch_step),
                    static_cast<long long>(steps_per_epoch), total[0] / total[1],
                    total[1] / seconds_since(window_start), stats.line().c_str());
      }
      if (epoch_end) {
        last_epoch_loss = total[3] > 0 ? total[2] / total[3] : 0;
        if (lead) {
          std::printf("epoch %d/%d done | mean loss %.4f | %.1f s\n", epoch + 1, f.epochs,
                      last_epoch_loss, seconds_since(epoch_start));
        }
      }
      std::fflush(stdout);
      window_loss = window_samples = 0;
      stats = {};
      window_start = std::chrono::steady_clock::now();
    };
    for (auto& batch : *loader) {
      if (epoch_step == my_steps) break;
      opt.zero_grad();
      torch::Tensor loss = torch::nll_loss(model->forward(batch.data), batch.target);
      loss.backward();
      {
        ddp::TimelineSpan span("optimizer step");  // shown in a DDP_TIMELINE trace
        opt.step();
      }
      ++state.iteration;
      ++epoch_step;
      const double n = batch.data.size(0), sum = loss.item<double>() * n;
      state.epoch_samples += batch.data.size(0);
      window_loss += sum;
      window_samples += n;
      epoch_loss += sum;
      epoch_samples += n;
      stats.add(model->stats());
      if (epoch_step % f.log_every == 0 && !f.uneven) report(false);  // a collective
      if (f.checkpoint_every > 0 && state.iteration % f.checkpoint_every == 0) save_snapshot();
    }
    if (join) join->join();
    report(true);
    epoch_loss = epoch_samples = 0;
  }
  // A finished snapshot: a job restarted from here goes straight to the end.
  if (f.checkpoint_every > 0 && state.iteration != first_step) save_snapshot();
  const double train_s = seconds_since(start);

  auto [test_loss, accuracy] =
      evaluate(*pg, net, test_images.to(device, dtype), test_targets.to(device));
  if (lead) {
    std::printf(
        "final: last epoch's train loss %.4f | held-out loss %.4f, accuracy %.2f%% "
        "(%lld samples) | %lld steps in %.1f s\n",
        last_epoch_loss, test_loss, 100 * accuracy, static_cast<long long>(test_images.size(0)),
        static_cast<long long>(state.iteration - first_step), train_s);
    std::printf("final: last iteration %s\n", model->stats().summary().c_str());
    if (compression) {
      std::printf("final: --compress %s: %s\n", f.compress.c_str(),
                  compression_summary(*compression).c_str());
    }
    std::printf("final: parameters fnv1a64 %016llx\n",
                static_cast<unsigned long long>(parameters_hash(net->parameters())));
    std::fflush(stdout);
    if (f.checkpoint.empty()) return;
    // The wrapped module, as a plain (non-DDP) checkpoint: it loads into a Net.
    torch::save(model->module_as<NetImpl>(), f.checkpoint);
    Net restored(net->kind, net->side, net->hidden, net->classes);
    restored->to(dtype);
    torch::load(restored, f.checkpoint);
    auto saved = net->parameters(), loaded = restored->parameters();
    for (size_t i = 0; i < saved.size(); ++i) {
      if (!torch::equal(saved[i].cpu(), loaded[i].cpu())) {
        throw std::runtime_error("checkpoint " + f.checkpoint + " does not reload the same model");
      }
    }
    std::printf("saved %s (reloads into a plain Net)\n", f.checkpoint.c_str());
    std::fflush(stdout);
  }
}

// --elastic: the same training through ddp::ElasticRunner. The job goes on
// when a rank dies (the survivors re-form and continue from the last step
// boundary) and grows when a rank joins (`ddprun --elastic MIN:MAX --join`).
// ElasticSampler keeps the epoch's position over all ranks, so a change of
// world size neither drops nor repeats a sample; progress lines come at the
// start of a step, before anything changes, so that a failure in their
// collective costs nothing.
template <typename Dataset>
void run_elastic(const Flags& f, const train::DeviceChoice& where, Dataset train,
                 const std::string& data_name, Net net, const torch::Tensor& test_images,
                 const torch::Tensor& test_targets) {
  const auto dtype = f.float64 ? torch::kDouble : torch::kFloat;
  const torch::Device device = train::device_of(where);
  auto to_device = stacked_onto(device, dtype);
  net->to(device, dtype);
  const auto sgd = torch::optim::SGDOptions(f.lr).momentum(0.9);
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (f.zero) {  // sharded over each generation by the runner, a replica kept beside each shard
    optimizer = std::make_unique<ddp::ZeroRedundancyOptimizer>(
        net->parameters(), sgd, ddp::ZeroOptions().elastic(true));
  } else {
    optimizer = std::make_unique<torch::optim::SGD>(net->parameters(), sgd);
  }
  torch::optim::Optimizer& opt = *optimizer;
  ddp::ElasticState state(net, opt);
  const int64_t train_size = static_cast<int64_t>(train.size().value());
  ddp::ElasticSampler sampler(train_size, f.batch_size, /*shuffle=*/true, /*seed=*/0);
  ddp::ElasticOptions options;
  options.ddp(ddp::DistributedDataParallelOptions()
                  .bucket_cap_mb(f.bucket_cap_mb)
                  .first_bucket_cap_mb(std::min(1.0, f.bucket_cap_mb.resolved().mib()))
                  .find_unused_parameters(f.find_unused)
                  .mixed_precision(mixed_precision_option(f)));
  if (f.timeout_s > 0) options.init().timeout(std::chrono::seconds(f.timeout_s));
  if (f.commit_every > 0) options.commit_every(f.commit_every);
  options.init().backend(where.backend);
  torch::manual_seed(1000);  // dropout: a stream per process (not carried over a change)

  double window_loss = 0, window_samples = 0;
  int64_t last_report = -1;
  auto window_start = std::chrono::steady_clock::now();
  ddp::ElasticRunner runner(options);
  // --report-state: this member's line about the state it holds (after a
  // formation, every member's is the same; ddp-chaos checks that).
  auto report_state = [&](const std::string& when, int member) {
    if (!f.report_state) return;
    std::printf("train: state %s: member %d pid %d step %lld parameters fnv1a64 %016llx\n",
                when.c_str(), member, static_cast<int>(getpid()),
                static_cast<long long>(state.training.iteration),
                static_cast<unsigned long long>(parameters_hash(net->parameters())));
    std::fflush(stdout);
  };
  runner.on_world_change([&](const ddp::ElasticWorld& was, const ddp::ElasticWorld& now) {
    last_report = -1;  // the same on every member (a joiner's too): the reports are collectives
    window_loss = window_samples = 0;
    window_start = std::chrono::steady_clock::now();
    report_state("generation " + std::to_string(now.generation), now.members[now.rank]);
    if (now.rank != 0) return;
    std::string members;
    for (int m : now.members) members += (members.empty() ? "" : ",") + std::to_string(m);
    if (was.generation < 0) {
      std::printf("train: device %s\n", where.why.c_str());
      std::printf(
          "train: elastic, %s: %lld training samples, %s, batch %lld per rank, SGD lr %g "
          "momentum 0.9%s, %d epochs\n",
          data_name.c_str(), static_cast<long long>(train_size), net->architecture(),
          static_cast<long long>(f.batch_size), f.lr,
          f.zero ? " (ZeRO: sharded, each shard kept twice)" : "", f.epochs);
    }
    std::printf(
        "train: generation %lld: %d ranks (members %s), from step %lld (epoch %lld, "
        "%lld samples into it)\n",
        static_cast<long long>(now.generation), now.world_size, members.c_str(),
        static_cast<long long>(state.training.iteration),
        static_cast<long long>(state.training.epoch + 1),
        static_cast<long long>(state.training.epoch_samples));
    std::fflush(stdout);
  });
  runner.run(state, [&](ddp::ElasticStep& step) {
    ddp::ProcessGroup& pg = *step.group();
    const bool lead = step.rank() == 0;
    const int64_t iteration = state.training.iteration;
    if (iteration > 0 && iteration % f.log_every == 0 && iteration != last_report) {
      last_report = iteration;
      auto total = sum_over_ranks(pg, {window_loss, window_samples});
      if (lead && total[1] > 0) {
        std::printf("epoch %lld/%d step %lld | %d ranks | loss %.4f | %6.0f samples/s\n",
                    static_cast<long long>(state.training.epoch + 1), f.epochs,
                    static_cast<long long>(iteration), step.world_size(), total[0] / total[1],
                    total[1] / seconds_since(window_start));
        std::fflush(stdout);
      }
      window_loss = window_samples = 0;
      window_start = std::chrono::steady_clock::now();
    }
    const auto indices = sampler.indices(state.training, step.rank(), step.world_size());
    if (indices.empty()) {
      if (sampler.next_epoch(state.training) < f.epochs) return true;
      auto [test_loss, accuracy] =
          evaluate(pg, net, test_images.to(device, dtype), test_targets.to(device));
      report_state("final", step.world().members[step.rank()]);
      if (lead) {
        std::printf(
            "final: held-out loss %.4f, accuracy %.2f%% | %lld steps, %d ranks at the end\n",
            test_loss, 100 * accuracy, static_cast<long long>(state.training.iteration),
            step.world_size());
        std::printf("final: parameters fnv1a64 %016llx\n",
                    static_cast<unsigned long long>(parameters_hash(net->parameters())));
        if (!f.checkpoint.empty()) {
          torch::save(net, f.checkpoint);
          std::printf("saved %s\n", f.checkpoint.c_str());
        }
        std::fflush(stdout);
      }
      return false;
    }
    const std::vector<size_t> request(indices.begin(), indices.end());
    auto batch = to_device.apply_batch(train.get_batch(request));
    opt.zero_grad();
    torch::Tensor loss = torch::nll_loss(step.model()->forward(batch.data), batch.target);
    loss.backward();
    opt.step();
    window_loss += loss.item<double>() * static_cast<double>(indices.size());
    window_samples += static_cast<double>(indices.size());
    sampler.advance(state.training, step.world_size());
    return true;
  });
}

// The training set, its name, the model for it and the held-out split, for
// the data the flags chose (`fashion`: the unzipped Fashion-MNIST, when
// found), handed to `train_on(train, name, net, test_images, test_targets)`.
template <typename TrainOn>
void with_data(const Flags& f, const std::optional<std::string>& fashion, TrainOn&& train_on) {
  namespace tr = torch::data::transforms;
  using torch::data::datasets::MNIST;
  if (!f.mnist.empty()) {
    auto train = MNIST(f.mnist, MNIST::Mode::kTrain).map(tr::Normalize<>(0.1307, 0.3081));
    MNIST test(f.mnist, MNIST::Mode::kTest);
    train_on(train, "MNIST", Net(NetImpl::Kind::MLP, 28, 512, 10, f.dropout),
             (test.images() - 0.1307) / 0.3081, test.targets());
  } else if (fashion) {
    const double mean = train::kFashionMnistMean, std = train::kFashionMnistStd;
    auto train = MNIST(*fashion, MNIST::Mode::kTrain).map(tr::Normalize<>(mean, std));
    MNIST test(*fashion, MNIST::Mode::kTest);
    train_on(train, "Fashion-MNIST", Net(NetImpl::Kind::CNN, 28, 64, 10, f.dropout),
             (test.images() - mean) / std, test.targets());
  } else {
    SyntheticDataset train(f.train_size, /*noise_seed=*/1), test(2000, /*noise_seed=*/2);
    train_on(train, "synthetic 10 classes of 1x16x16",
             Net(NetImpl::Kind::MLP, 16, 512, 10, f.dropout), test.images(), test.targets());
  }
}

// --device for this process: libtorch's GPU count and the launcher's place
// of this rank on its host (ddprun, torchrun, mpirun, srun).
train::DeviceChoice choose_device(const Flags& f) {
  const int gpus = static_cast<int>(torch::cuda::device_count());
  int local_rank = 0, local_ranks = 1;
  if (f.elastic) {
    // ddprun --elastic: a joiner has no RANK yet, only its place on the host.
    if (const char* r = std::getenv("LOCAL_RANK")) local_rank = std::atoi(r);
    if (const char* n = std::getenv("LOCAL_WORLD_SIZE")) local_ranks = std::max(1, std::atoi(n));
  } else {
    const auto launch = ddp::launch_info_from_env();
    local_rank = launch.local_rank;
    local_ranks = launch.local_world_size;
  }
  const char* backend = std::getenv("DDP_BACKEND");
#ifdef DDP_WITH_NCCL
  const bool nccl_built = true;
#else
  const bool nccl_built = false;
#endif
  return train::choose_device(f.device, gpus, local_rank, local_ranks,
                              backend != nullptr ? backend : "", nccl_built, f.elastic);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  try {
    f = train::parse(argc, argv);
  } catch (const train::UsageError& e) {
    std::cerr << "train: " << e.what() << " (see --help)\n";
    return 2;
  }
  if (f.help) {
    std::cout << train::kUsage;
    return 0;
  }
  try {
    torch::set_num_threads(f.threads);
    torch::manual_seed(f.seed);  // the same model on every rank (DDP broadcasts rank 0's anyway)
    const train::DeviceChoice where = choose_device(f);
    if (f.elastic) {
      // No group yet (the runner forms them): each process looks for the
      // data alone (on one host they all find the same).
      std::optional<std::string> fashion;
      if (f.mnist.empty() && f.data == "fashion-mnist") {
        fashion = train::unpack_fashion_mnist(f.data_dir);
      }
      with_data(f, fashion,
                [&](auto train, const std::string& name, Net net, const torch::Tensor& images,
                    const torch::Tensor& targets) {
                  run_elastic(f, where, std::move(train), name, net, images, targets);
                });
      return 0;
    }
    ddp::InitOptions init;
    if (f.timeout_s > 0) init.timeout(std::chrono::seconds(f.timeout_s));
    init.backend(where.backend);
    auto pg = ddp::init_process_group(init);
    std::optional<std::string> fashion;  // the unzipped files' directory
    if (f.mnist.empty() && f.data == "fashion-mnist") {
      fashion = fashion_mnist_on_every_rank(*pg, f.data_dir);
      if (!fashion && pg->rank() == 0) {
        std::printf(
            "train: no Fashion-MNIST in %s (Debian's dataset-fashion-mnist is not installed): "
            "training on synthetic data instead\n",
            f.data_dir.c_str());
      }
    }
    with_data(f, fashion,
              [&](auto train, const std::string& name, Net net, const torch::Tensor& images,
                  const torch::Tensor& targets) {
                run(f, where, pg, std::move(train), name, net, images, targets);
              });
    ddp::destroy_process_group();
    return 0;
  } catch (const c10::Error& e) {  // libtorch's: its what() carries a C++ backtrace
    std::cerr << "train: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "train: " << e.what() << "\n";
    return 1;
  }
}
