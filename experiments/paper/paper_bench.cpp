// paper_bench: the experiments of the paper's reproduction that bench's
// ddp_bench does not keep (experiments/paper/README.md), each run once per
// rank by a launcher:
//
//   ddprun --nproc-per-node 2 build/experiments/paper/paper_bench split --json out.json
#include "paper_subcommands.h"

#include <vector>

namespace {

const std::vector<ddp_bench::Subcommand> kSubcommands = {
    {"split", "allreduce of 60M floats split into S-element tensors (paper Fig. 2): ddp vs c10d",
     &ddp_bench::run_split, &ddp_bench::kSplitUsage},
    {"variants", "the blog's six data-parallel variants with timelines: compute/comm/overlap %",
     &ddp_bench::run_variants, &ddp_bench::kVariantsUsage},
    {"converge", "loss per micro-batch on real digits, synchronized every K (no_sync)",
     &ddp_bench::run_converge, &ddp_bench::kConvergeUsage},
};

}  // namespace

int main(int argc, char** argv) {
  return ddp_bench::run_subcommands("paper_bench", kSubcommands, argc, argv);
}
