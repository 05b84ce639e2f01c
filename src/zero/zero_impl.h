// ZeroRedundancyOptimizer's state, shared by zero.cpp (split, step,
// broadcast), replica.cpp (elastic's replica shard), fingerprint.cpp
// (cross-rank check), checkpoint.cpp, and src/elastic (through ZeroAccess).
#pragma once

#include <ddp/errors.h>
#include <ddp/zero.h>

#include <ATen/core/Tensor.h>

#include <type_traits>
#include <utility>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace ddp {

struct ZeroRedundancyOptimizer::Impl {
  using StateMap = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;
  using StatePtr = std::unique_ptr<torch::optim::OptimizerParamState>;

  ProcessGroupPtr group;  // null until sharded (elastic)
  ZeroWrapped wrapped;
  double bucket_cap_mb = 25;
  std::vector<at::Tensor> params;  // all groups' parameters, in order (#i)
  std::vector<size_t> group_of;    // #i -> its param group
  std::vector<int> owner;          // #i -> rank
  // Per param group, the #i of this rank's shard, in the local optimizer's order.
  std::vector<std::vector<size_t>> local;
  std::unique_ptr<torch::optim::Optimizer> optimizer;

  // ZeroOptions::elastic: the next rank's shard (#i, in order) and the
  // optimizer that steps its replica (over those parameters themselves).
  bool elastic = false;
  std::vector<size_t> replica;
  std::unique_ptr<torch::optim::Optimizer> replica_optimizer;
  // Updates begun (step() or the hook): how elastic training tells that the
  // optimizer moved since a step boundary.
  int64_t updates = 0;

  // Updated parameters travel from their owner in buckets of one dtype.
  struct Bucket {
    int root;
    at::ScalarType dtype;
    int64_t numel = 0;
    std::vector<size_t> params;
  };
  std::vector<Bucket> buckets;

  // After consolidate_state_dict on this rank: #i -> its serialized state.
  bool consolidated = false;
  int64_t consolidated_at = -1;  // the step count it was taken at
  std::map<size_t, std::string> states;
  int64_t steps = 0;

  // overlap_with_ddp: #i by TensorImpl, and parameters the hook has updated
  // since the last step().
  bool overlap = false;
  std::unordered_map<const void*, size_t> index_of;
  size_t updated = 0;

  // InvalidArgument when not sharded (elastic, outside the runner's step).
  void check_sharded() const;
  // This rank's context in `group`, for errors about `operation`; raises as
  // check_sharded() when not sharded.
  ErrorContext context(std::string operation) const;
  // Splits the parameters over `group` (every rank computes the same split)
  // and makes this rank's optimizer and, elastic, its replica, each group
  // with `options[g]`; `states` (#i -> state) fill them, the rest start empty.
  void shard(ProcessGroupPtr group,
             const std::vector<std::unique_ptr<torch::optim::OptimizerOptions>>& options,
             std::map<size_t, StatePtr> states);
  // Broadcasts each bucket from its owner into the parameters, all in flight at once.
  void broadcast(const std::vector<Bucket>& buckets);
  // Steps the local optimizer on these (owned) parameters only.
  void step_only(const std::vector<size_t>& indices);
  // Steps `optimizer` on these (param group, tensor) only.
  static void step_subset(torch::optim::Optimizer& optimizer,
                          const std::vector<std::pair<size_t, at::Tensor>>& subset);
  // Elastic: steps the replica of these parameters of the next rank's shard
  // (all of them when empty), from their current values and `grads` (set as
  // their .grad; when empty, the .grad they have). Before the owner's
  // broadcast.
  void step_replica(const std::vector<size_t>& indices, const std::vector<at::Tensor>& grads);
  torch::optim::OptimizerParamState* state_of(size_t index) const;
  // Where #i's state lives on this rank: the local or the replica
  // optimizer's map and the tensor it is keyed by; {nullptr, {}} when this
  // rank keeps none of it.
  std::pair<StateMap*, at::Tensor> home_of(size_t index);
  // One parameter's state as bytes (a libtorch archive), and back.
  static std::string state_to_bytes(const torch::optim::OptimizerParamState& state);
  StatePtr state_from_bytes(const std::string& bytes) const;
};

namespace detail {

// What elastic training (src/elastic) reaches inside the optimizer.
struct ZeroAccess {
  using Impl = ZeroRedundancyOptimizer::Impl;
  static Impl& of(ZeroRedundancyOptimizer& zero) { return *zero.impl_; }
};

// Per-parameter states as they travel (consolidate_state_dict, an elastic
// generation's handover): entries [#i][length][bytes], length 0 for a
// parameter without state.
void append_state_entry(std::string& blob, size_t index, const std::string& bytes);
// Calls f(#i, bytes) for each entry of `size` bytes at `blob`.
void for_each_state_entry(const char* blob, size_t size,
                          const std::function<void(size_t, std::string)>& f);

// Greedy largest-first: each parameter (by element count, ties by index) to
// the rank with the fewest elements so far (ties: the lowest rank).
std::vector<int> partition_by_size(const std::vector<int64_t>& numels, int world);

// Collective: raises on every rank when ranks wrap different optimizers or
// hold different parameters, or when one of them found `local_error`.
void check_same_on_every_rank(ProcessGroup& group, const std::string& optimizer,
                              const std::vector<at::Tensor>& params,
                              const std::vector<size_t>& group_of, const std::string& local_error);

}  // namespace detail
}  // namespace ddp
