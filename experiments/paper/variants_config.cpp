// `paper_bench variants`' command line: the usage text and its parsing.
#include "paper_subcommands.h"
#include "variants_bench.h"

namespace ddp_bench {

const char* const kVariantsUsage = R"(usage: paper_bench variants [options]
Run once per rank (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the
environment), e.g. ddprun --nproc-per-node 2 paper_bench variants --model resnet18.
The six data-parallel variants of dudeperf3ct's blog post on implementing
data parallelism in PyTorch, on ddp's Gloo group, timed and traced per
micro-batch:
  simple     blocking allreduce per gradient after backward, every micro-batch
  simple_ga  the same every --accum micro-batches (gradient accumulation)
  hook_ga    + per-parameter gradient hooks doing the blocking allreduce
  async_ga   + the hooks launch asynchronous allreduces, waited after backward
  bucket_ga  + gradients copied into flat buckets, an async allreduce per bucket
  ddp        ddp::DistributedDataParallel with no_sync() between syncs
Rank 0 prints ms per micro-batch, writes each variant's timeline into the
JSON (`experiments/paper/evaluate.py timeline` draws the blog's compute /
non-compute / idle / overlap / communication-overhead % and allreduce calls
and ms from it), and checks that every variant's final
parameters agree across ranks (exit status 1 if not).

options:
  --model M          mlp, resnet18, resnet50, bert_small, bert_base
                     (bench/models/models.h; default mlp)
  --batch B          samples per rank and micro-batch (default: the model's)
  --image-size S     resnets: 3 x S x S inputs (default: the model's)
  --seq-len L        berts: tokens per sample (default: the model's)
  --seed S           model weights' seed (default 0)
  --variants LIST    any of simple,simple_ga,hook_ga,async_ga,bucket_ga,ddp
                     (default all six, in that order)
  --iters K          timed micro-batches per variant and round, a multiple of
                     --accum (default 8)
  --rounds R         timed rounds (default 3): variants interleaved round by
                     round, the order reversed every other round
  --warmup W         untimed rounds first (default 1)
  --accum A          micro-batches per optimizer step of the accumulating
                     variants (default 2)
  --bucket-cap-mb X  bucket_ga's and ddp's bucket size in MiB (default 25)
  --lr R             SGD learning rate (default 0.01)
  --threads T        intra-op threads per rank (default 1): torch::set_num_threads
                     and OpenBLAS's pool
  --gloo-threads G   worker threads of the Gloo group (default 1)
  --json PATH        rank 0 writes results and rank 0's timelines of the
                     timed micro-batches there (Chrome trace events)
Every variant holds its own model, gradients and buffers at once: mind the
memory with resnet50 and bert_base (or pass fewer --variants).
)";

VariantsConfig parse_variants_config(Args& args) {
  VariantsConfig c;
  c.model = take_model_options(args, "mlp");
  c.variants = args.take_names("--variants", "simple,simple_ga,hook_ga,async_ga,bucket_ga,ddp",
                               variant_names());
  c.accum = args.take_int("--accum", 1, 1 << 20).value_or(c.accum);
  c.iters = args.take_int("--iters", 1, 1 << 20).value_or(c.iters);
  if (c.iters % c.accum != 0) {
    throw UsageError("--iters " + std::to_string(c.iters) + " is not a multiple of --accum " +
                     std::to_string(c.accum));
  }
  c.rounds = args.take_int("--rounds", 1, 1 << 20).value_or(c.rounds);
  c.warmup = args.take_int("--warmup", 0, 1 << 20).value_or(c.warmup);
  c.bucket_cap_mb = args.take_double("--bucket-cap-mb", 0.0).value_or(c.bucket_cap_mb);
  c.lr = args.take_double("--lr", 0.0).value_or(c.lr);
  c.threads = args.take_int("--threads", 1, 1024).value_or(c.threads);
  c.gloo_threads = args.take_int("--gloo-threads", 1, 64).value_or(c.gloo_threads);
  c.json_path = args.take("--json").value_or("");
  args.expect_empty();
  return c;
}

}  // namespace ddp_bench
