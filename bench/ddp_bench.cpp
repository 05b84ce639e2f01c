// ddp_bench: benchmarks of ddp, one subcommand per kind, each run once per
// rank by a launcher:
//
//   ddprun --nproc-per-node 2 build/bench/ddp_bench collectives --json out.json
//
// A new subcommand is a new file plus one line in kSubcommands.
#include "subcommands.h"

#include <ddp/backends/gloo.h>
#include <ddp/init.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace ddp_bench {

ddp::InitOptions init_options(int gloo_threads) {
  ddp::InitOptions init;
  if (ddp::resolve_backend_name(init.backend()) == "gloo") {
    init.backend_options(
        std::make_shared<ddp::GlooOptions>(ddp::GlooOptions().threads(gloo_threads)));
  }
  return init;
}

}  // namespace ddp_bench

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(ddp_bench::Args);
  const char* const* usage;
};

const Subcommand kSubcommands[] = {
    {"collectives", "allreduce latency and bus bandwidth: ddp vs c10d's ProcessGroupGloo",
     &ddp_bench::run_collectives, &ddp_bench::kCollectivesUsage},
    {"train", "training iterations of DistributedDataParallel, with its limit measured alongside",
     &ddp_bench::run_train, &ddp_bench::kTrainUsage},
    {"split", "allreduce of 60M floats split into S-element tensors (paper Fig. 2): ddp vs c10d",
     &ddp_bench::run_split, &ddp_bench::kSplitUsage},
    {"variants", "the blog's six data-parallel variants with timelines: compute/comm/overlap %",
     &ddp_bench::run_variants, &ddp_bench::kVariantsUsage},
    {"models", "the models alone: parameter list with checksums", &ddp_bench::run_models,
     &ddp_bench::kModelsUsage},
    {"converge", "loss per micro-batch on real digits, synchronized every K (no_sync)",
     &ddp_bench::run_converge, &ddp_bench::kConvergeUsage},
};

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: ddp_bench <subcommand> [options]   (run once per rank, e.g. under\n"
               "       ddprun --nproc-per-node 2 ddp_bench <subcommand> ...)\n\nsubcommands:\n");
  for (const auto& s : kSubcommands) std::fprintf(out, "  %-12s %s\n", s.name, s.summary);
  std::fprintf(out, "\n`ddp_bench <subcommand> --help` describes its options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& s : kSubcommands) {
    if (std::strcmp(argv[1], s.name) != 0) continue;
    return ddp_bench::run_main(std::string("ddp_bench ") + s.name, {argv + 2, argv + argc},
                               *s.usage, s.run);
  }
  std::fprintf(stderr, "ddp_bench: unknown subcommand '%s'\n\n", argv[1]);
  print_usage(stderr);
  return 2;
}
