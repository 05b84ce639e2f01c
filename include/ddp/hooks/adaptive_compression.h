// Adaptive-precision compression: a communication hook that chooses, per
// bucket and per phase of training, how much to compress the bucket, from a
// ladder of levels (full precision, float16 or bfloat16, PowerSGD of a chosen
// rank), switching on Accordion's signal (Agarwal et al., "Adaptive Gradient
// Communication via Critical Learning Regime Identification", MLSys 2021):
// while the norm of the accumulated gradient changes fast, training is in a
// critical regime and gets the most precise level; while it is steady, the
// bucket moves one level toward compression each window.
//
//   auto state = model->register_comm_hook(ddp::AdaptiveCompressionState(),
//                                          ddp::adaptive_compression_hook);
//   ... train ...
//   auto stats = state->stats();  // bytes sent, levels used, every switch
//
// Contract
// - Windows: the iterations (synchronized backward passes) are cut into
//   windows of `window` iterations. Every bucket starts at levels[0] (the
//   start of training is critical) and keeps it for the first two windows
//   (the first gives the norm the second is compared with). At the first
//   bucket launch of each later window, rank 0 compares the norm of its own
//   gradient of that bucket summed over the window just ended (before
//   compression) with that of the window before: a relative change of at
//   least `critical_threshold` is critical and sends the bucket to levels[0];
//   a smaller one moves it one level down (the last level stays). Rank 0's
//   mark_critical() makes its next such judgement critical (for a LR drop).
// - Agreement: before its first collective the hook checks that every
//   rank's options agree (one allreduce of 2 doubles): if not,
//   InvalidArgument on every rank. Then rank 0 decides and every rank
//   adopts its decision (one allreduce of 3 doubles per bucket and window,
//   on the hook's group), so every rank compresses a bucket the same way
//   whatever its own gradients.
// - Join: once rank 0 has joined (ddp::Join) its sums are zeros, so the
//   decisions see one drop (critical) and then a steady regime, whatever
//   the other ranks' gradients.
// - Error feedback (`error_feedback`): what a PowerSGD level loses of a
//   bucket is added to that bucket's next gradient; a bucket that moves to a
//   level that is not PowerSGD sends its remaining error with its next
//   gradient and then has none.
// - Buckets are identified by index, and DDP rebuilds them after the first
//   iteration: what the hook keeps per bucket (the error, PowerSGD's warm
//   start) is dropped before the second and the third iteration.
// - Statistics (stats()) and the timeline: the bytes of every collective the
//   hook sent (its checks and decisions included), against what full
//   precision would have sent for the buckets; the bucket
//   iterations spent at each level; every switch, with its iteration and
//   signal. With DDP_TIMELINE set, each bucket's windows appear on a
//   "compression" row, named by their level.
// - Threads: the hook runs on DDP's communication thread; stats() and
//   mark_critical() may be called from any thread.
#pragma once

#include <ddp/comm_hook.h>

#include <torch/arg.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ddp {

// One rung of the ladder.
struct CompressionLevel {
  enum class Kind { kFull, kFloat16, kBFloat16, kPowerSGD };
  Kind kind = Kind::kFull;
  int64_t powerSGD_rank = 0;  // PowerSGD's matrix approximation rank; 0 otherwise

  static CompressionLevel full() { return {Kind::kFull, 0}; }
  static CompressionLevel fp16() { return {Kind::kFloat16, 0}; }
  static CompressionLevel bf16() { return {Kind::kBFloat16, 0}; }
  static CompressionLevel powerSGD(int64_t rank) { return {Kind::kPowerSGD, rank}; }
  // "full", "fp16", "bf16", "powerSGD rank 4".
  std::string name() const;
};

struct AdaptiveCompressionOptions {
  // The group to reduce over. Default: ddp::default_process_group().
  TORCH_ARG(ProcessGroupPtr, process_group) = nullptr;
  // The ladder, from the most precise level to the most compressed; at
  // least one, PowerSGD ranks >= 1. Default: full, fp16, PowerSGD rank 4.
  TORCH_ARG(std::vector<CompressionLevel>, levels) = {
      CompressionLevel::full(), CompressionLevel::fp16(), CompressionLevel::powerSGD(4)};
  // Iterations per window (>= 1). Default 50.
  TORCH_ARG(int64_t, window) = 50;
  // The relative change of the accumulated gradient's norm, from one window
  // to the next, at or above which training is in a critical regime (> 0).
  // Default 0.5 (Accordion's).
  TORCH_ARG(double, critical_threshold) = 0.5;
  // PowerSGD levels: compress a gradient (rows x rest) only where
  // (rows + cols) * rank * min_compression_rate < rows * cols (> 0). Default 2.
  TORCH_ARG(double, min_compression_rate) = 2;
  // PowerSGD levels: keep what compression lost and add it to the bucket's
  // next gradient. Default true.
  TORCH_ARG(bool, error_feedback) = true;
  // PowerSGD levels: the seed of their random initial Qs (the same on every
  // rank). Default 0.
  TORCH_ARG(uint64_t, random_seed) = 0;
};

struct AdaptiveCompressionStats {
  struct Switch {
    int64_t iteration = 0;  // the first iteration at the new level
    size_t bucket = 0;
    size_t from = 0, to = 0;  // level indices
    bool critical = false;
    double norm_change = 0;  // rank 0's relative change of the accumulated norm
  };
  int64_t iterations = 0;          // synchronized iterations the hook has seen
  int64_t bytes_sent = 0;          // the payload of all the hook's allreduces on this rank
  int64_t bytes_uncompressed = 0;  // what full precision would have sent for the buckets
  // Per level index: bucket reductions made at that level.
  std::vector<int64_t> reductions_per_level;
  std::vector<Switch> switches;  // in order
  // Each bucket's current level index (empty before the first iteration).
  std::vector<size_t> bucket_levels;
  // bytes_sent / bytes_uncompressed (1 before any reduction).
  double sent_fraction() const {
    return bytes_uncompressed > 0 ? static_cast<double>(bytes_sent) / bytes_uncompressed : 1;
  }
};

namespace detail {
class AdaptiveCompression;
}

class AdaptiveCompressionState {
 public:
  // InvalidArgument for options out of range (each named).
  explicit AdaptiveCompressionState(AdaptiveCompressionOptions options = {});
  ~AdaptiveCompressionState();
  AdaptiveCompressionState(AdaptiveCompressionState&&) noexcept;
  AdaptiveCompressionState& operator=(AdaptiveCompressionState&&) noexcept;

  const AdaptiveCompressionOptions& options() const;
  AdaptiveCompressionStats stats() const;
  // Rank 0's next judged decision of every bucket is critical (other ranks' calls do nothing).
  void mark_critical();

  // What a checkpoint carries (comm_hook.h, HookStateDict): the iteration,
  // each bucket's level and decisions and the PowerSGD levels' warm starts
  // as `shared`; this rank's error feedback, rank 0's window sums and norms,
  // the marks and the statistics as `per_rank` (in another world size they
  // start afresh). The options are the constructor's, not saved.
  HookStateDict state_dict() const;
  // InvalidArgument naming the entry for a dict that is not a state_dict's.
  void load_state_dict(const HookStateDict& dict);

 private:
  friend FuturePtr adaptive_compression_hook(AdaptiveCompressionState& state, GradBucket& bucket);
  std::unique_ptr<detail::AdaptiveCompression> impl_;
};

// Reduces the bucket at its current level (see above) and returns the
// average, as every hook does.
FuturePtr adaptive_compression_hook(AdaptiveCompressionState& state, GradBucket& bucket);

}  // namespace ddp
