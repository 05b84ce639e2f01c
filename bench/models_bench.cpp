// `ddp_bench models`: the models of bench/models/models.h, alone, in one
// process (no launcher): --print lists a model's parameters with a checksum of
// their initial values, in the format of `bench/models/models.py --print`
// (`bench/evaluate.py models` diffs the two); --time measures one local
// training step, the figure the models' default sizes were chosen by.
#include "models/models.h"
#include "subcommands.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <cstdio>

namespace ddp_bench {

const char* const kModelsUsage = R"(usage: ddp_bench models --print NAME [--seed S]
       ddp_bench models --time NAME [--batch B] [--image-size S] [--seq-len L]
                        [--iters K] [--threads T] [--seed S] [--lr R]
       ddp_bench models --list
The models of the evaluation harness (bench/models/models.h), in one process,
no launcher.

  --print NAME   one line per parameter: "index name [d0, d1, ...] checksum"
                 (checksum: the sum of its initial values in float64, %.9e),
                 then "total N parameters in T tensors"; the same format as
                 `python3 bench/models/models.py --print NAME`
                 (`bench/evaluate.py models` compares the two)
  --time NAME    one local training step (zero_grad, forward, loss, backward,
                 SGD step): median of K after 1 warm-up, min and max, and
                 the median split
  --list         each model with its defaults (describe())

options:
  --seed S       weights: torch::manual_seed(S) before construction (default 0);
                 the timed batch uses data seed S+1
  --batch B      samples (default: the model's)
  --image-size S resnets: 3 x S x S inputs (default: the model's)
  --seq-len L    berts: tokens per sample (default: the model's)
  --iters K      timed steps (default 5)
  --threads T    intra-op threads: torch::set_num_threads and OpenBLAS's own
                 pool (default 1)
  --lr R         SGD learning rate (default 0.01)
models: mlp, resnet18, resnet50, bert_small, bert_base
)";

namespace {

int print_params(const ModelOptions& o) {
  torch::NoGradGuard no_grad;
  auto model = make_model(o);
  int64_t index = 0, total = 0;
  for (const auto& item : model.ptr()->named_parameters()) {
    const auto& p = item.value();
    std::string shape;
    for (auto d : p.sizes()) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    std::printf("%lld %s [%s] %.9e\n", static_cast<long long>(index++), item.key().c_str(),
                shape.c_str(), p.to(torch::kFloat64).sum().item<double>());
    total += p.numel();
  }
  std::printf("total %lld parameters in %lld tensors\n", static_cast<long long>(total),
              static_cast<long long>(index));
  return 0;
}

int time_step(const ModelOptions& o, int64_t iters, int64_t threads, double lr) {
  auto model = make_model(o);
  auto params = model.ptr()->parameters();
  int64_t elements = 0;
  for (const auto& p : params) elements += p.numel();
  auto batch = make_batch(o, static_cast<uint64_t>(o.seed + 1));
  torch::optim::SGD opt(params, torch::optim::SGDOptions(lr));
  std::vector<double> total, fwd, bwd, step;
  double first_loss = 0, last_loss = 0;
  for (int64_t it = 0; it <= iters; ++it) {
    const auto t0 = Clock::now();
    opt.zero_grad();
    auto t = Clock::now();
    auto loss = model_loss(o, model.forward(batch.input), batch.target);
    const double f = ms_since(t);
    t = Clock::now();
    loss.backward();
    const double b = ms_since(t);
    t = Clock::now();
    opt.step();
    const double s = ms_since(t);
    const double all = ms_since(t0);
    last_loss = loss.item<double>();
    if (it == 0) {
      first_loss = last_loss;
      continue;  // the warm-up
    }
    total.push_back(all);
    fwd.push_back(f);
    bwd.push_back(b);
    step.push_back(s);
  }
  const Stats st = summarize(total);
  std::printf("models --time: %s; %lld parameters (%.1f MiB); %lld thread(s); libtorch %s\n",
              describe(o).c_str(), static_cast<long long>(elements),
              static_cast<double>(elements) * 4 / 1048576, static_cast<long long>(threads),
              TORCH_VERSION);
  std::printf(
      "step median %.1f ms (min %.1f, max %.1f; %lld after 1 warm-up): forward+loss %.1f, "
      "backward %.1f, SGD step %.1f ms; loss %.4f -> %.4f\n",
      st.median, st.min, st.max, static_cast<long long>(st.count), summarize(fwd).median,
      summarize(bwd).median, summarize(step).median, first_loss, last_loss);
  return 0;
}

}  // namespace

int run_models(Args args) {
  const auto print_name = args.take("--print");
  const auto time_name = args.take("--time");
  const bool list = args.take_flag("--list");
  if (static_cast<int>(print_name.has_value()) + static_cast<int>(time_name.has_value()) +
          static_cast<int>(list) !=
      1) {
    throw UsageError("give exactly one of --print NAME, --time NAME, --list");
  }
  ModelOptions o;
  o.name = print_name ? *print_name : time_name ? *time_name : "";
  o.seed = args.take_int("--seed", 0, int64_t{1} << 40).value_or(0);
  o.batch = args.take_int("--batch", 1, 1 << 20).value_or(0);
  o.image_size = args.take_int("--image-size", 1, 4096).value_or(0);
  o.seq_len = args.take_int("--seq-len", 1, 1 << 20).value_or(0);
  const int64_t iters = args.take_int("--iters", 1, 1000000).value_or(5);
  const int64_t threads = args.take_int("--threads", 1, 1024).value_or(1);
  const double lr = args.take_double("--lr", 0.0).value_or(0.01);
  args.expect_empty();

  torch::set_num_threads(static_cast<int>(threads));
  limit_openblas_threads(static_cast<int>(threads));
  if (list) {
    for (const auto& name : model_names()) {
      ModelOptions m;
      m.name = name;
      std::printf("%s\n", describe(m).c_str());
    }
    return 0;
  }
  try {
    o = with_defaults(o);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  return print_name ? print_params(o) : time_step(o, iters, threads, lr);
}

}  // namespace ddp_bench
