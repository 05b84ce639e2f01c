// ddp_bench's subcommands. Each lives in its own file and is registered in
// ddp_bench.cpp's table; `args` are the arguments after the subcommand's
// name. A subcommand returns the process's exit status and throws
// UsageError for a bad command line. (experiments/paper/paper_subcommands.h
// declares paper_bench's, which use what is declared here.)
#pragma once

#include "bench_util.h"

namespace ddp {
struct InitOptions;
}

namespace ddp_bench {

struct ModelOptions;  // models/models.h

// ddp's InitOptions for a benchmark (init_options.cpp): the backend ddp would
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

// soak_bench.cpp: a long DDP run's memory, descriptors, threads and shm
// segments, sampled, with their slopes after the warm-up.
int run_soak(Args args);
extern const char* const kSoakUsage;

// models_bench.cpp: the models of bench/models/models.h alone (no launcher):
// parameter lists with checksums (vs bench/models/models.py).
int run_models(Args args);
extern const char* const kModelsUsage;
// Also there, for train and paper_bench's variants: --model (`default_name`
// when absent; required when that is empty), --batch, --image-size,
// --seq-len and --seed, the model's defaults filled in; UsageError when bad.
ModelOptions take_model_options(Args& args, const std::string& default_name);

}  // namespace ddp_bench
