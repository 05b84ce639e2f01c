// What one training iteration cost, as DDP measured it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ddp {

// One bucket's communication in an iteration, in milliseconds after
// IterationStats::backward_start. A bucket can be launched before backward
// starts (one holding only parameters that find_unused_parameters found
// unused at forward): its launch_ms is then negative.
struct BucketTiming {
  int64_t bytes = 0;
  double launch_ms = 0;  // its allreduce (or communication hook) was started
  double done_ms = 0;    // its result was ready: the Work's completion time;
                         // with a communication hook, when finalize saw the
                         // hook's future complete (an upper bound)
};

// Bucket autotuning (DistributedDataParallelOptions::bucket_cap_mb "auto"),
// as of an iteration.
struct BucketTuning {
  // kOff: a fixed size. kTrial: still tuning (the first iteration, then
  // the trials). kSettled: the choice is in effect.
  enum class Phase { kOff, kTrial, kSettled };
  Phase phase = Phase::kOff;
  int64_t cap_bytes = 0;  // the bucket size this iteration's buckets were cut with
  // Each measured trial so far: a bucket size and the slowest rank's
  // iteration time with it (ms), in the order they ran.
  std::vector<std::pair<int64_t, double>> samples;
  int64_t trial_iterations = 0;  // trial iterations so far (settling ones included)
};

struct IterationStats {
  int64_t iteration = 0;              // synchronized iterations so far, this one included
  bool synchronized = false;          // false under no_sync
  double forward_ms = 0;              // the wrapped module's forward
  double backward_compute_ms = 0;     // backward start to the last gradient hook
  double communication_ms = 0;        // first bucket launched to the last one reduced
  double overlapped_ms = 0;           // part of communication_ms during backward compute
  double finalize_ms = 0;             // end of backward compute to backward() returning
  std::vector<int64_t> bucket_bytes;  // one entry per bucket, in launch order
  // When backward started (the clock of the timings above), and each
  // bucket's launch and completion, in launch order: with forward_ms and
  // backward_compute_ms, the timeline of the iteration (e.g. for a trace).
  std::chrono::steady_clock::time_point backward_start;
  std::vector<BucketTiming> bucket_timings;
  bool buckets_rebuilt = false;   // the buckets were rebuilt before this iteration
  BucketTuning bucket_tuning;     // bucket_cap_mb "auto": its trials and choice
  int64_t unused_parameters = 0;  // globally unused (find_unused_parameters / static_graph)
  std::vector<std::string> unused_parameter_names;  // filled when DDP_DEBUG=detail
  int64_t dropped_parameters = 0;  // left out by layer-drop hints (Reducer::hint_unused)
  int64_t skipped_parameters = 0;  // left out as unused (skip_all_reduce_unused_params)
  // Operator calls the Reducer made to fill the buckets, a batched copy
  // counted once: one per gradient, or with batched_grad_copy two per
  // bucket (three with zeros in it). Not kernels: a batched copy of mixed
  // dtypes, or on libtorch 1.13, copies tensor by tensor.
  int64_t bucket_fill_ops = 0;

  size_t bucket_count() const { return bucket_bytes.size(); }
  // One line, e.g. for DDP_DEBUG=info logs.
  std::string summary() const;
};

}  // namespace ddp
