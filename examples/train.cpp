// The README's main job: a classifier trained with DistributedDataParallel,
// one process per rank.
//
//   ddprun --nproc-per-node 2 build/examples/train [flags]
//
// Data: a deterministic synthetic 10-class set (examples/synthetic_dataset.h)
// or MNIST with --mnist DIR (the four ubyte files). Every rank sees a
// different shard (libtorch's DistributedRandomSampler, reshuffled per epoch).
// Rank 0 prints progress (loss averaged over all ranks, global samples/s and
// DDP's own statistics), then loss and accuracy on the held-out split, and
// saves the trained module.
#include "synthetic_dataset.h"

#include <ddp/ddp.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace {

const char* const kUsage =
    "usage: ddprun --nproc-per-node N train [flags]\n"
    "  --epochs E          passes over the training data (default 4)\n"
    "  --batch-size B      samples per rank per step (default 64)\n"
    "  --lr LR             SGD learning rate, momentum 0.9 (default 0.01)\n"
    "  --log-every N       progress line every N steps on rank 0 (default 50)\n"
    "  --checkpoint PATH   where rank 0 saves the trained module\n"
    "                      (default train_checkpoint.pt)\n"
    "  --bucket-cap-mb MB  DDP bucket size (default 25; the first bucket is\n"
    "                      min(1, MB))\n"
    "  --find-unused       DDP find_unused_parameters(true)\n"
    "  --zero              shard SGD's momentum across ranks (ddp::ZeroRedundancyOptimizer)\n"
    "  --mnist DIR         train on MNIST from DIR instead of synthetic data\n"
    "  --threads T         intra-op threads per rank (default 1)\n"
    "  --timeout S         seconds a collective may wait for the other ranks before\n"
    "                      the job fails (default 30 minutes; $DDP_TIMEOUT, read\n"
    "                      by init_process_group, takes precedence)\n"
    "  -h, --help          print this text\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Flags {
  int epochs = 4;
  int64_t batch_size = 64;
  double lr = 0.01;
  int64_t log_every = 50;
  std::string checkpoint = "train_checkpoint.pt";
  double bucket_cap_mb = 25;
  bool find_unused = false;
  bool zero = false;
  std::string mnist;
  int threads = 1;
  int timeout_s = 0;  // 0: the default
  bool help = false;
};

template <typename T>
T number(const std::string& flag, const std::string& text, T min) {
  size_t used = 0;
  T value{};
  try {
    if constexpr (std::is_floating_point_v<T>) {
      value = static_cast<T>(std::stod(text, &used));
    } else {
      value = static_cast<T>(std::stoll(text, &used));
    }
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || value < min) {
    std::ostringstream message;
    message << flag << " expects a number >= " << min << ", got '" << text << "'";
    throw UsageError(message.str());
  }
  return value;
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    bool inline_value = false;
    if (auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inline_value = true;
    }
    auto next = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) throw UsageError(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "-h" || flag == "--help") f.help = true;
    else if (flag == "--epochs") f.epochs = number<int>(flag, next(), 1);
    else if (flag == "--batch-size") f.batch_size = number<int64_t>(flag, next(), 1);
    else if (flag == "--lr") f.lr = number<double>(flag, next(), 0);
    else if (flag == "--log-every") f.log_every = number<int64_t>(flag, next(), 1);
    else if (flag == "--checkpoint") f.checkpoint = next();
    else if (flag == "--bucket-cap-mb") f.bucket_cap_mb = number<double>(flag, next(), 0);
    else if (flag == "--find-unused") f.find_unused = true;
    else if (flag == "--zero") f.zero = true;
    else if (flag == "--mnist") f.mnist = next();
    else if (flag == "--threads") f.threads = number<int>(flag, next(), 1);
    else if (flag == "--timeout") f.timeout_s = number<int>(flag, next(), 1);
    else throw UsageError("unknown flag '" + flag + "'");
    if (inline_value && (flag == "--find-unused" || flag == "--zero" || flag == "--help")) {
      throw UsageError(flag + " takes no value");
    }
  }
  return f;
}

// An MLP classifier: flatten, two hidden ReLU layers, log-probabilities.
struct NetImpl : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  const int64_t in, hidden, classes;
  NetImpl(int64_t in, int64_t hidden, int64_t classes) : in(in), hidden(hidden), classes(classes) {
    fc1 = register_module("fc1", torch::nn::Linear(in, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
    fc3 = register_module("fc3", torch::nn::Linear(hidden, classes));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1(x.flatten(1)));
    x = torch::relu(fc2(x));
    return torch::log_softmax(fc3(x), 1);
  }
};
TORCH_MODULE(Net);

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
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

// The training loop, for either dataset (`train`: examples of one sample).
template <typename Dataset>
void run(const Flags& f, const std::shared_ptr<ddp::ProcessGroup>& pg, Dataset train,
         const std::string& data_name, Net net, const torch::Tensor& test_images,
         const torch::Tensor& test_targets) {
  const int rank = pg->rank(), world = pg->size();
  const bool lead = rank == 0;
  const size_t train_size = train.size().value();
  const int64_t per_rank = (static_cast<int64_t>(train_size) + world - 1) / world;
  const int64_t steps_per_epoch = (per_rank + f.batch_size - 1) / f.batch_size;

  ddp::DistributedDataParallel model(
      net, ddp::DistributedDataParallelOptions()
               .bucket_cap_mb(f.bucket_cap_mb)
               .first_bucket_cap_mb(std::min(1.0, f.bucket_cap_mb))
               .find_unused_parameters(f.find_unused));
  const auto sgd = torch::optim::SGDOptions(f.lr).momentum(0.9);
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (f.zero) {
    opt = std::make_unique<ddp::ZeroRedundancyOptimizer>(model->parameters(), sgd,
                                                         ddp::ZeroOptions().process_group(pg));
  } else {
    opt = std::make_unique<torch::optim::SGD>(model->parameters(), sgd);
  }

  if (lead) {
    int64_t params = 0;
    for (const auto& p : model->parameters()) params += p.numel();
    std::printf("train: %d ranks, %s: %zu training samples (%lld per rank), %lld held out\n"
                "train: MLP with %lld parameters, batch %lld per rank (%lld global), "
                "SGD lr %g momentum 0.9%s, %d epochs of %lld steps\n",
                world, data_name.c_str(), train_size, static_cast<long long>(per_rank),
                static_cast<long long>(test_images.size(0)), static_cast<long long>(params),
                static_cast<long long>(f.batch_size),
                static_cast<long long>(f.batch_size * world), f.lr,
                f.zero ? " (ZeRO: state sharded)" : "", f.epochs,
                static_cast<long long>(steps_per_epoch));
    std::fflush(stdout);
  }

  const auto start = std::chrono::steady_clock::now();
  auto window_start = start;
  double window_loss = 0, window_samples = 0, epoch_loss = 0, epoch_samples = 0;
  double last_epoch_loss = 0;
  StatsWindow stats;
  int64_t step = 0;
  for (int epoch = 0; epoch < f.epochs; ++epoch) {
    // A loader owns its sampler, so each epoch gets a new one whose shuffle
    // is seeded by the epoch (the same on every rank: disjoint shards).
    torch::data::samplers::DistributedRandomSampler sampler(train_size, world, rank);
    sampler.set_epoch(epoch);
    auto loader = torch::data::make_data_loader(
        train.map(torch::data::transforms::Stack<>()), std::move(sampler),
        torch::data::DataLoaderOptions().batch_size(f.batch_size));
    int64_t epoch_step = 0;
    const auto epoch_start = std::chrono::steady_clock::now();
    // Every rank takes part (the same steps on each): loss and sample counts
    // over the window and the epoch.
    auto report = [&](bool epoch_end) {
      auto total = sum_over_ranks(*pg, {window_loss, window_samples, epoch_loss, epoch_samples});
      if (lead && total[1] > 0) {
        std::printf("epoch %d/%d step %4lld/%lld | loss %.4f | %6.0f samples/s | %s\n",
                    epoch + 1, f.epochs, static_cast<long long>(epoch_step),
                    static_cast<long long>(steps_per_epoch), total[0] / total[1],
                    total[1] / seconds_since(window_start), stats.line().c_str());
      }
      if (epoch_end) {
        last_epoch_loss = total[2] / total[3];
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
    epoch_loss = epoch_samples = 0;
    for (auto& batch : *loader) {
      opt->zero_grad();
      torch::Tensor loss = torch::nll_loss(model->forward(batch.data), batch.target);
      loss.backward();
      opt->step();
      ++step;
      ++epoch_step;
      const double n = batch.data.size(0), sum = loss.item<double>() * n;
      window_loss += sum;
      window_samples += n;
      epoch_loss += sum;
      epoch_samples += n;
      stats.add(model->stats());
      if (epoch_step % f.log_every == 0) report(false);
    }
    report(true);
  }
  const double train_s = seconds_since(start);

  auto [test_loss, accuracy] = evaluate(*pg, net, test_images, test_targets);
  if (lead) {
    std::printf("final: last epoch's train loss %.4f | held-out loss %.4f, accuracy %.2f%% "
                "(%lld samples) | %lld steps in %.1f s\n",
                last_epoch_loss, test_loss, 100 * accuracy,
                static_cast<long long>(test_images.size(0)), static_cast<long long>(step), train_s);
    std::printf("final: last iteration %s\n", model->stats().summary().c_str());
    // The wrapped module, as a plain (non-DDP) checkpoint: it loads into a Net.
    torch::save(model->module_as<NetImpl>(), f.checkpoint);
    Net restored(net->in, net->hidden, net->classes);
    torch::load(restored, f.checkpoint);
    auto saved = net->parameters(), loaded = restored->parameters();
    for (size_t i = 0; i < saved.size(); ++i) {
      if (!torch::equal(saved[i], loaded[i])) {
        throw std::runtime_error("checkpoint " + f.checkpoint + " does not reload the same model");
      }
    }
    std::printf("saved %s (reloads into a plain Net)\n", f.checkpoint.c_str());
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  try {
    f = parse(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "train: " << e.what() << " (see --help)\n";
    return 2;
  }
  if (f.help) {
    std::cout << kUsage;
    return 0;
  }
  try {
    torch::set_num_threads(f.threads);
    ddp::InitOptions init;
    if (f.timeout_s > 0) init.timeout(std::chrono::seconds(f.timeout_s));
    auto pg = ddp::init_process_group(init);
    torch::manual_seed(1);  // the same model on every rank (DDP broadcasts rank 0's anyway)
    if (f.mnist.empty()) {
      SyntheticDataset train(40000, /*noise_seed=*/1), test(2000, /*noise_seed=*/2);
      run(f, pg, train, "synthetic 10 classes of 1x16x16", Net(16 * 16, 512, 10), test.images(),
          test.targets());
    } else {
      namespace tr = torch::data::transforms;
      using torch::data::datasets::MNIST;
      auto train = MNIST(f.mnist, MNIST::Mode::kTrain).map(tr::Normalize<>(0.1307, 0.3081));
      MNIST test(f.mnist, MNIST::Mode::kTest);
      run(f, pg, train, "MNIST", Net(28 * 28, 512, 10), (test.images() - 0.1307) / 0.3081,
          test.targets());
    }
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
