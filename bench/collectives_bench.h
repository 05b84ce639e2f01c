// `ddp_bench collectives`' pieces besides the measurement (collectives_bench.cpp):
// its command line (collectives_config.cpp) and its report, the table on
// stdout and the JSON (collectives_report.cpp).
#pragma once

#include "bench_util.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ddp_bench {

struct CollectivesConfig {
  std::vector<int64_t> sizes;
  int64_t fixed_iters = 0;  // 0: scale by budget
  int64_t min_iters = 5;    // samples when scaled by the budget
  int64_t max_iters = 500;
  double budget_s = 10.0;
  int64_t warmup = 2;
  int64_t threads = 1;
  int64_t gloo_threads = 1;
  std::vector<std::string> impls;
  std::string json_path;
  bool raw = false;
};

// The command line after `collectives` (kCollectivesUsage); UsageError when bad.
CollectivesConfig parse_collectives_config(Args& args);

// One implementation at one size.
struct CollectivesRow {
  std::string impl;
  int64_t bytes;
  int64_t iters;
  Stats stats;
  std::vector<double> samples;  // µs, slowest rank, in the order taken
};

// Rank 0: prints the table (medians, ratios against each baseline, bus
// bandwidth) of `rows`, the implementations in the order of `impls`, and
// writes --json; `bind` is where the groups bound.
void report_collectives(const CollectivesConfig& cfg, const std::vector<std::string>& impls,
                        const std::vector<CollectivesRow>& rows, int world,
                        const std::string& bind);

}  // namespace ddp_bench
