// ddp_bench's subcommands. Each lives in its own file and is registered in
// ddp_bench.cpp's table; `args` are the arguments after the subcommand's name.
// A subcommand returns the process's exit status and throws UsageError for a
// bad command line.
#pragma once

#include "bench_util.h"

namespace ddp {
struct InitOptions;
}

namespace ddp_bench {

struct ModelOptions;  // models/models.h

// ddp's InitOptions for a benchmark (ddp_bench.cpp): the backend ddp would
// choose ($DDP_BACKEND, else gloo), with `gloo_threads` worker threads when
// that is gloo.
ddp::InitOptions init_options(int gloo_threads);

// collectives_bench.cpp: allreduce, ddp against c10d's ProcessGroupGloo.
int run_collectives(Args args);
extern const char* const kCollectivesUsage;

// train_bench.cpp: training iterations of DistributedDataParallel on a model,
// with the limit (local compute, allreduce of all gradient bytes) measured
// in the same run; `bench/evaluate.py train` adds PyTorch's DDP.
int run_train(Args args);
extern const char* const kTrainUsage;

// split_bench.cpp: the paper's Fig. 2 (a, b): allreduce of 60M floats split
// into tensors of S elements, all launched then all waited; ddp vs c10d.
int run_split(Args args);
extern const char* const kSplitUsage;

// variants_bench.cpp: the blog's six data-parallel variants (variants.h),
// timed with per-micro-batch timelines (timeline.h).
int run_variants(Args args);
extern const char* const kVariantsUsage;

// models_bench.cpp: the models of bench/models/models.h alone (no launcher):
// parameter lists with checksums (vs bench/models/models.py).
int run_models(Args args);
extern const char* const kModelsUsage;
// Also there, for train and variants: --model (`default_name` when absent;
// required when that is empty), --batch, --image-size, --seq-len and --seed,
// the model's defaults filled in; UsageError when bad.
ModelOptions take_model_options(Args& args, const std::string& default_name);

// converge_bench.cpp: training loss per micro-batch on scikit-learn's digits,
// gradients synchronized every K micro-batches (no_sync on the others);
// bench/pytorch_converge.py is the PyTorch DDP twin (paper Fig. 11).
int run_converge(Args args);
extern const char* const kConvergeUsage;

}  // namespace ddp_bench
