// elastic_bench: what elastic mode costs a training step when nothing fails
// (ddp/elastic.h): the same DDP training loop, plain (init_process_group)
// or through ElasticRunner, on the benchmark models (bench/models). One
// process per rank:
//
//   ddprun --nproc-per-node 2 elastic_bench --mode plain --model mlp
//   ddprun --nproc-per-node 2 --elastic 1:2 elastic_bench --mode elastic --model mlp
//
// --zero 1: through a ZeroRedundancyOptimizer (plain: over the job's group;
// elastic: ZeroOptions().elastic(true), which keeps a replica of the next
// rank's shard) instead of the whole SGD.
//
// Prints on rank 0: "elastic_bench: MODE MODEL: mean M ms/step, median D,
// over N steps" (after W warm-up steps, on rank 0). The mean is the one to
// compare: it carries elastic mode's full copy every commit_every (100)
// steps, when N reaches it.
// bench/elastic_bench.sh alternates the modes and reports their ratio.
#include "bench_util.h"
#include "models/models.h"

#include <ddp/ddp.h>

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {

struct Config {
  std::string mode = "plain", model = "mlp";
  int64_t steps = 100, warmup = 3;
  bool zero = false;
};

const char* const kUsage =
    "usage: elastic_bench [--mode plain|elastic] [--model M] [--steps N] [--warmup W] "
    "[--zero 0|1]   (under ddprun)\n";

int run(ddp_bench::Args args) {
  Config c;
  c.mode = args.take("--mode").value_or(c.mode);
  if (c.mode != "plain" && c.mode != "elastic") throw ddp_bench::UsageError("--mode plain|elastic");
  c.model = args.take("--model").value_or(c.model);
  c.steps = args.take_int("--steps", 1, 1 << 30).value_or(c.steps);
  c.warmup = args.take_int("--warmup", 0, 1 << 30).value_or(c.warmup);
  c.zero = args.take("--zero").value_or("0") == "1";
  args.expect_empty();
  {
    torch::set_num_threads(1);
    ddp_bench::ModelOptions mo;
    mo.name = c.model;
    mo = ddp_bench::with_defaults(mo);
    auto model = ddp_bench::make_model(mo);
    const auto sgd = torch::optim::SGDOptions(0.01).momentum(0.9);
    const auto params = model.ptr()->parameters();
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    // Made after the group in plain mode (a plain ZeRO shards at construction).
    auto make_optimizer = [&](ddp::ZeroOptions zero) -> torch::optim::Optimizer& {
      if (c.zero) {
        optimizer = std::make_unique<ddp::ZeroRedundancyOptimizer>(params, sgd, zero);
      } else {
        optimizer = std::make_unique<torch::optim::SGD>(params, sgd);
      }
      return *optimizer;
    };
    std::vector<double> times;
    int rank = 0;
    // One training step: the batch depends on the step and the rank only.
    auto train = [&](ddp::DistributedDataParallel& ddp, int r, int64_t step) {
      const auto batch = ddp_bench::make_batch(mo, static_cast<uint64_t>(1000 * step + r));
      optimizer->zero_grad();
      ddp_bench::model_loss(mo, ddp->forward(batch.input), batch.target).backward();
      optimizer->step();
    };
    // A step is timed from its start to the next one's, so that the elastic
    // side's includes its step boundary (commit and one-element allreduce).
    const int64_t total = c.warmup + c.steps;
    auto last = std::chrono::steady_clock::now();
    auto lap = [&](int64_t s) {
      const auto now = std::chrono::steady_clock::now();
      if (s > c.warmup)
        times.push_back(std::chrono::duration<double, std::milli>(now - last).count());
      last = now;
    };
    if (c.mode == "plain") {
      auto pg = ddp::init_process_group();
      rank = pg->rank();
      make_optimizer(ddp::ZeroOptions());
      ddp::DistributedDataParallel ddp(model);
      for (int64_t s = 0; s <= total; ++s) {
        lap(s);
        if (s < total) train(ddp, rank, s);
      }
    } else {
      ddp::ElasticState state(model, make_optimizer(ddp::ZeroOptions().elastic(true)));
      ddp::ElasticRunner runner;
      runner.run(state, [&](ddp::ElasticStep& step) {
        rank = step.rank();
        const int64_t s = state.training.iteration;
        lap(s);
        if (s >= total) return false;
        train(step.model(), step.rank(), s);
        ++state.training.iteration;
        return true;
      });
    }
    if (rank == 0) {
      const ddp_bench::Stats st = ddp_bench::summarize(times);
      std::printf("elastic_bench: %s %s%s: mean %.2f ms/step, median %.2f, over %zu steps\n",
                  c.mode.c_str(), c.model.c_str(), c.zero ? " zero" : "", st.mean, st.median,
                  st.count);
    }
    if (c.mode == "plain") ddp::destroy_process_group();
    return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  return ddp_bench::run_main("elastic_bench", {argv + 1, argv + argc}, kUsage, run);
}
