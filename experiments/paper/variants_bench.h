// `paper_bench variants`' pieces besides the runs and the report
// (variants_bench.cpp): its command line (variants_config.cpp) and the check
// of every variant's final parameters (variants_check.cpp).
#pragma once

#include "bench_util.h"
#include "models/models.h"
#include "timeline.h"
#include "variants.h"

#include <ddp/process_group.h>

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ddp_bench {

struct VariantsConfig {
  ModelOptions model;
  std::vector<std::string> variants;
  int64_t iters = 8, rounds = 3, warmup = 1, accum = 2;
  double bucket_cap_mb = 25, lr = 0.01;
  int64_t threads = 1, gloo_threads = 1;
  std::string json_path;
};

// The command line after `variants` (kVariantsUsage); UsageError when bad.
VariantsConfig parse_variants_config(Args& args);

// One variant's run: the variant, its optimizer, its timeline, its samples.
struct VariantRun {
  std::string name;
  Timeline timeline;
  std::unique_ptr<DataParallelVariant> variant;
  std::unique_ptr<torch::optim::SGD> optimizer;
  std::vector<double> samples_ms;  // per window: ms per micro-batch (slowest rank after the run)
  // Checks.
  bool ranks_agree = false;
  double checksum_spread = 0;
  double diff_vs_ref = -1;  // max |Δ| against simple_ga's parameters (-1: not compared)
  double ref_scale = 0;     // max |Δ| of simple_ga's parameters from the initial ones
};

// Collective: compares every run's final parameters across ranks (checksums:
// MAX against MIN allreduce) and, for all but `simple`, against simple_ga's
// (max |Δ| over all ranks, with how far training moved simple_ga's from the
// initial ones of `model`'s seed as the scale); fills the runs' check fields.
void check_final_parameters(ddp::ProcessGroup& pg, const ModelOptions& model,
                            std::vector<std::unique_ptr<VariantRun>>& runs);

}  // namespace ddp_bench
