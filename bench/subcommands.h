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

}  // namespace ddp_bench
