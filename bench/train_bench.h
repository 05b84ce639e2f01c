// `ddp_bench train`'s pieces besides the measurement loop (train_bench.cpp):
// its command line (train_config.cpp) and its report, the table on stdout and
// the JSON (train_report.cpp).
#pragma once

#include "bench_util.h"
#include "models/models.h"
#include "timeline.h"

#include <ddp/bucket_cap.h>
#include <ddp/statistics.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ddp_bench {

struct TrainConfig {
  ModelOptions model;
  int world_size = 0;
  ddp::BucketCapMb bucket_cap_mb = 25;  // or "auto"
  double first_bucket_cap_mb = 1;
  int64_t iters = 20;
  int64_t warmup = 3;
  int64_t process_groups = 1;
  int64_t sync_every = 1;
  bool timeline = false;
  std::vector<std::string> impls;
  double lr = 0.01;
  int64_t seed = 0;
  int64_t threads = 1;
  int64_t gloo_threads = 1;
  bool overlap = true;
  bool gradient_as_bucket_view = false;
  bool batched_grad_copy = false;  // for ddp (ddp_batched has it anyway)
  bool init_sync = true;
  std::string hook = "none";
  std::string device = "cpu";  // or "cuda": LOCAL_RANK's GPU
  std::string tag;
  std::string json_path;
};

// Whether `impl` is a training iteration (ddp, its variants ddp_copying and
// ddp_batched, or local) rather than a collective alone.
inline bool is_training_impl(const std::string& impl) {
  return impl == "ddp" || impl == "local" || impl == "ddp_copying" || impl == "ddp_batched";
}

// The command line after `train` (kTrainUsage); UsageError when bad.
TrainConfig parse_train_config(Args& args);

// The launcher's world size (ddprun's, torchrun's, mpirun's or srun's
// variables) must be --world-size: say which is wrong.
void check_world_size(const TrainConfig& c);

// One iteration's own split, as the bench sees it (ms).
struct TrainSplit {
  double zero_grad = 0, forward = 0, backward = 0, step = 0;
};

// Per iteration: the bench's split and DDP's stats (ddp only).
struct TrainSample {
  double total_ms = 0;
  TrainSplit split;
  ddp::IterationStats stats;
  double loss = 0;
};

// What the measurements leave for the report.
struct TrainResults {
  std::vector<std::string> names;  // the model's parameters, in order
  std::vector<std::vector<int64_t>> shapes;
  int64_t elements = 0;
  int world = 0;
  int blas_threads = 0;
  // Per measurement (and "<measurement>/warmup"): this rank's samples.
  std::map<std::string, std::vector<TrainSample>> samples;
  // Per measurement: the slowest rank's time of each timed sample.
  std::map<std::string, std::vector<double>> slowest;
  std::vector<double> tx_ranks;        // every rank's bytes per iteration (-1: not measured)
  const Timeline* timeline = nullptr;  // the timed DDP iterations' (--timeline)
};

// Rank 0: prints the table and writes --json.
void report_train(const TrainConfig& cfg, TrainResults results);

}  // namespace ddp_bench
