// PowerSGD gradient compression (Vogels et al., NeurIPS 2019) as DDP
// communication hooks (PyTorch's documentation, "DDP Communication Hooks":
// "PowerSGD Communication Hook").
//
//   ddp::PowerSGDState state(pg, /*matrix_approximation_rank=*/2, /*start_powerSGD_iter=*/10);
//   model->register_comm_hook(std::move(state), ddp::powerSGD_hook);
//
// The hook keeps its state between iterations (error feedback, warm start),
// keyed by bucket index; the model's buckets are rebuilt after iteration 1,
// hence start_powerSGD_iter >= 2 when either is on.
#pragma once

#include <ddp/comm_hook.h>

#include <cstdint>
#include <map>
#include <random>

namespace ddp {

class PowerSGDState {
 public:
  // Arguments and defaults as in the doc. InvalidArgument when
  // matrix_approximation_rank < 1, min_compression_rate <= 0,
  // orthogonalization_epsilon < 0, compression_stats_logging_frequency < 1,
  // or start_powerSGD_iter < 2 with error feedback or warm start.
  explicit PowerSGDState(ProcessGroupPtr process_group, int64_t matrix_approximation_rank = 1,
                         int64_t start_powerSGD_iter = 1000, double min_compression_rate = 2,
                         bool use_error_feedback = true, bool warm_start = true,
                         double orthogonalization_epsilon = 0, uint64_t random_seed = 0,
                         int64_t compression_stats_logging_frequency = 10000);

  // Hyperparameters (null process_group: the default group).
  ProcessGroupPtr process_group;
  int64_t matrix_approximation_rank;
  int64_t start_powerSGD_iter;
  double min_compression_rate;
  bool use_error_feedback;
  bool warm_start;
  double orthogonalization_epsilon;
  uint64_t random_seed;
  int64_t compression_stats_logging_frequency;

  // Iterations seen (counted at each iteration's last bucket).
  int64_t iter() const { return iter_; }
  // (numel before / numel after, numel before, numel after) over all
  // compressed iterations so far; rate 0 before any.
  struct CompressionStats {
    double rate = 0;
    int64_t numel_before = 0;
    int64_t numel_after = 0;
  };
  CompressionStats compression_stats() const;
  // The last Q of each bucket (warm start), for inspection and tests.
  const std::map<size_t, at::Tensor>& q_memory() const { return q_memory_; }
  const std::map<size_t, at::Tensor>& error_memory() const { return error_; }

  // What a checkpoint carries (comm_hook.h, HookStateDict): the iteration,
  // the seed sequence, the statistics, the bucket layout the memories
  // belong to and each bucket's P and Q (the same on every rank, after
  // their allreduce) as `shared`; this rank's error feedback as `per_rank`.
  // The hyperparameters are the constructor's, not saved.
  HookStateDict state_dict() const;
  // InvalidArgument naming the entry for a dict that is not a state_dict's.
  void load_state_dict(const HookStateDict& dict);

 private:
  friend FuturePtr powerSGD_hook(PowerSGDState& state, GradBucket& bucket);
  friend FuturePtr batched_powerSGD_hook(PowerSGDState& state, GradBucket& bucket);

  // How both hooks begin: before start_powerSGD_iter, the bucket's plain
  // allreduce (the iteration counted); null once PowerSGD has started.
  FuturePtr allreduce_before_start(GradBucket& bucket);
  void maybe_increase_iter(const GradBucket& bucket);
  // The buckets were rebuilt (GradBucket::layout changed): what is kept per
  // bucket index belongs to other gradients now, so it goes.
  void forget_if_rebuilt(const GradBucket& bucket);
  // After decompression: remembers the local error (error feedback), drops
  // P and Q without warm start, counts the iteration.
  void end_compressed_step(size_t index, const at::Tensor& input_copy,
                           const at::Tensor& decompressed, const GradBucket& bucket);
  void report_compression_stats(const GradBucket& bucket);
  // A loaded state's memories of bucket `index` (CPU copies) moved to the
  // bucket's device.
  void place(size_t index, const at::Device& device);
  // The seed of the next random Q: the same sequence on every rank.
  uint64_t next_seed();

  int64_t iter_ = 0;
  int64_t numel_before_ = 0, numel_after_ = 0;
  int64_t next_stats_report_ = 0;
  std::mt19937 rng_;
  std::map<size_t, at::Tensor> error_;     // bucket index -> local compression error
  std::map<size_t, at::Tensor> p_memory_;  // bucket index -> all of its Ps, flat
  std::map<size_t, at::Tensor> q_memory_;  // bucket index -> all of its Qs, flat
  int64_t layout_ = 0;                      // GradBucket::layout of the memories above
};

// Layer-wise PowerSGD: each gradient M of a bucket (viewed as rows x rest)
// is compressed to P (rows x r) and Q (cols x r) when
// (rows + cols) * r * min_compression_rate < rows * cols; the rest (biases,
// small matrices) is allreduced uncompressed, as one batch. Then P = MQ,
// allreduce all Ps, orthogonalize, Q = M^T P, allreduce all Qs, M = P Q^T.
// Vanilla allreduce before start_powerSGD_iter.
FuturePtr powerSGD_hook(PowerSGDState& state, GradBucket& bucket);

// PowerSGD on the whole bucket at once, viewed as a square matrix (zero
// padded), truncated back to the bucket's length afterwards. Faster, usually
// less accurate unless matrix_approximation_rank is 1.
FuturePtr batched_powerSGD_hook(PowerSGDState& state, GradBucket& bucket);

}  // namespace ddp
