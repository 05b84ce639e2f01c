// ddp_bench's subcommands. Each lives in its own file and is registered in
// ddp_bench.cpp's table; `args` are the arguments after the subcommand's name.
// A subcommand returns the process's exit status and throws UsageError for a
// bad command line.
#pragma once

#include "bench_util.h"

namespace ddp_bench {

// collectives_bench.cpp: allreduce, ddp against c10d's ProcessGroupGloo.
int run_collectives(Args args);
extern const char* const kCollectivesUsage;

// train_bench.cpp: training iterations of DistributedDataParallel on a model,
// with the limit (local compute, allreduce of all gradient bytes) measured
// in the same run; bench/train_compare.sh adds PyTorch's DDP.
int run_train(Args args);
extern const char* const kTrainUsage;

}  // namespace ddp_bench
