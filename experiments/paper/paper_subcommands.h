// paper_bench's subcommands: the paper's and the blog's experiments that
// bench/ does not keep. Each lives in its own file and is registered in
// paper_bench.cpp's table; they share bench's pieces (bench/subcommands.h:
// Args, init_options, take_model_options) through ddp_bench_util.
#pragma once

#include "subcommands.h"  // bench/subcommands.h

namespace ddp_bench {

// split_bench.cpp: the paper's Fig. 2 (a, b): allreduce of 60M floats split
// into tensors of S elements, all launched then all waited; ddp vs c10d.
int run_split(Args args);
extern const char* const kSplitUsage;

// variants_bench.cpp: the blog's six data-parallel variants (variants.h),
// timed with per-micro-batch timelines (bench/timeline.h).
int run_variants(Args args);
extern const char* const kVariantsUsage;

// converge_bench.cpp: training loss per micro-batch on scikit-learn's digits,
// gradients synchronized every K micro-batches (no_sync on the others);
// experiments/paper/pytorch_converge.py is the PyTorch DDP twin (paper
// Fig. 11).
int run_converge(Args args);
extern const char* const kConvergeUsage;

}  // namespace ddp_bench
