// ddp_bench: benchmarks of ddp, one subcommand per kind, each run once per
// rank by a launcher:
//
//   ddprun --nproc-per-node 2 build/bench/ddp_bench collectives --json out.json
//
// A new subcommand is a new file plus one line in kSubcommands.
// (experiments/paper's paper_bench holds the paper's own: split, variants,
// converge.)
#include "subcommands.h"

#include <vector>

namespace {

const std::vector<ddp_bench::Subcommand> kSubcommands = {
    {"collectives", "allreduce latency and bus bandwidth: ddp vs c10d's ProcessGroupGloo",
     &ddp_bench::run_collectives, &ddp_bench::kCollectivesUsage},
    {"train", "training iterations of DistributedDataParallel, with its limit measured alongside",
     &ddp_bench::run_train, &ddp_bench::kTrainUsage},
    {"models", "the models alone: parameter list with checksums", &ddp_bench::run_models,
     &ddp_bench::kModelsUsage},
    {"soak", "a long DDP run: RSS, descriptors, threads and shm segments, with their slopes",
     &ddp_bench::run_soak, &ddp_bench::kSoakUsage},
};

}  // namespace

int main(int argc, char** argv) {
  return ddp_bench::run_subcommands("ddp_bench", kSubcommands, argc, argv);
}
