// `ddp_bench train`'s command line: the usage text and its parsing.
#include "subcommands.h"
#include "train_bench.h"

#include <ddp/init.h>

#include <algorithm>
#include <stdexcept>

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
                       (bench/models/models.h; cross-entropy), mlp4096 (16 x
                       Linear(4096,4096), batch 256: the GPU benchmark's)
  --device D           cpu (default) or cuda: the models, data and gradients on
                       LOCAL_RANK's GPU (modulo the GPUs seen); each timed
                       iteration ends with a device synchronize
  --world-size N       number of ranks; must equal $WORLD_SIZE
  --bucket-cap-mb X    DDP bucket size in MiB, or auto (bucket autotuning: use
                       --warmup >= 22 so that timed iterations are settled;
                       the JSON's bucket_tuning has the trials; default 25)
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
  --impls LIST         any of ddp,local,allreduce,allreduce_buckets,ddp_copying,
                       ddp_batched (default the first four; allreduce_buckets
                       needs ddp; ddp_copying: DDP with zero_copy_buckets(false);
                       ddp_batched: DDP with batched_grad_copy(true))
  --lr R               SGD learning rate (default 0.01)
  --seed S             model seed (default 0); rank r's data seed is S+1+r
  --threads T          intra-op threads per rank (default 1): torch::set_num_threads
                       and OpenBLAS's own pool (openblas_set_num_threads)
  --gloo-threads G     worker threads of ddp's Gloo group (default 1)
  --no-overlap         DDP reduces all buckets after backward (diagnosis)
  --gradient-as-bucket-view  DDP's gradient_as_bucket_view(true)
  --batched-grad-copy  DDP's batched_grad_copy(true) for ddp and ddp_copying too
  --no-init-sync       DDP's init_sync(false): no broadcast at construction
                       (the construction's time is printed either way)
  --hook NAME          communication hook: none (default), fp16, bf16,
                       powersgd1, powersgd2, powersgd4 (powerSGD_hook with that
                       matrix_approximation_rank), batched_powersgd1; PowerSGD
                       with start_powerSGD_iter=2, error feedback and warm
                       start on (use --warmup >= 3 so that timed iterations
                       are all compressed)
  --timeline           keep each timed DDP iteration's timeline in the JSON
                       (events with timestamps: forward, backward compute,
                       step; each bucket's launch to completion)
  --tag TEXT           recorded in the JSON (e.g. the round of a comparison)
  --json PATH          rank 0 writes the results there (with every sample)
)";

TrainConfig parse_train_config(Args& args) {
  TrainConfig c;
  c.model = take_model_options(args, "");
  c.seed = c.model.seed;
  auto ws = args.take_int("--world-size", 1, 1 << 20);
  if (!ws) throw UsageError("--world-size is required (the number of ranks, e.g. 2)");
  c.world_size = static_cast<int>(*ws);
  if (auto cap = args.take("--bucket-cap-mb")) {
    try {
      c.bucket_cap_mb = ddp::BucketCapMb(*cap);
    } catch (const std::exception& e) {
      throw UsageError(std::string("--bucket-cap-mb: ") + e.what());
    }
    if (!c.bucket_cap_mb.is_auto() && c.bucket_cap_mb.mib() < 0) {
      throw UsageError("--bucket-cap-mb must be >= 0 or auto, got " + *cap);
    }
  }
  c.first_bucket_cap_mb =
      args.take_double("--first-bucket-cap-mb", 0.0).value_or(c.first_bucket_cap_mb);
  c.iters = args.take_int("--iters", 1, 1000000).value_or(c.iters);
  c.warmup = args.take_int("--warmup", 0, 1000000).value_or(c.warmup);
  c.process_groups = args.take_int("--process-groups", 1, 64).value_or(c.process_groups);
  c.sync_every = args.take_int("--sync-every", 1, 1 << 20).value_or(c.sync_every);
  c.timeline = args.take_flag("--timeline");
  c.impls = args.take_names("--impls", "ddp,local,allreduce,allreduce_buckets",
                            {"ddp", "local", "allreduce", "allreduce_buckets", "ddp_copying",
                             "ddp_batched"});
  const bool has_ddp = std::find(c.impls.begin(), c.impls.end(), "ddp") != c.impls.end();
  const bool has_buckets =
      std::find(c.impls.begin(), c.impls.end(), "allreduce_buckets") != c.impls.end();
  if (has_buckets && !has_ddp) throw UsageError("allreduce_buckets needs ddp in --impls");
  c.lr = args.take_double("--lr", 0.0).value_or(c.lr);
  c.threads = args.take_int("--threads", 1, 1024).value_or(c.threads);
  c.gloo_threads = args.take_int("--gloo-threads", 1, 64).value_or(c.gloo_threads);
  c.overlap = !args.take_flag("--no-overlap");
  c.gradient_as_bucket_view = args.take_flag("--gradient-as-bucket-view");
  c.batched_grad_copy = args.take_flag("--batched-grad-copy");
  c.init_sync = !args.take_flag("--no-init-sync");
  c.hook = args.take("--hook").value_or(c.hook);
  c.device = args.take("--device").value_or(c.device);
  if (c.device != "cpu" && c.device != "cuda") {
    throw UsageError("--device must be cpu or cuda, got " + c.device);
  }
  static const char* const kHooks[] = {
      "none", "fp16", "bf16", "powersgd1", "powersgd2", "powersgd4", "batched_powersgd1"};
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

void check_world_size(const TrainConfig& c) {
  const ddp::LaunchInfo launch = ddp::launch_info_from_env();
  if (launch.world_size < 0) {
    throw std::runtime_error(
        "WORLD_SIZE is not set: run one process per rank under a launcher, e.g. "
        "`ddprun --nproc-per-node " +
        std::to_string(c.world_size) + " ddp_bench train ...`, bench/netem, or mpirun -np " +
        std::to_string(c.world_size));
  }
  if (launch.world_size != c.world_size) {
    throw std::runtime_error("--world-size " + std::to_string(c.world_size) +
                             " but the launcher (" + launch.source + ") started " +
                             std::to_string(launch.world_size) +
                             " ranks: they must be equal (e.g. ddprun --nproc-per-node " +
                             std::to_string(c.world_size) + ")");
  }
}

}  // namespace ddp_bench
