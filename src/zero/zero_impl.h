// ZeroRedundancyOptimizer's state, shared by zero.cpp (split, step,
// broadcast), fingerprint.cpp (cross-rank check) and checkpoint.cpp.
#pragma once

#include <ddp/zero.h>

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace ddp {

struct ZeroRedundancyOptimizer::Impl {
  ProcessGroupPtr group;
  ZeroWrapped wrapped;
  std::vector<at::Tensor> params;  // all groups' parameters, in order (#i)
  std::vector<size_t> group_of;    // #i -> its param group
  std::vector<int> owner;          // #i -> rank
  // Per param group, the #i of this rank's shard, in the local optimizer's order.
  std::vector<std::vector<size_t>> local;
  std::unique_ptr<torch::optim::Optimizer> optimizer;

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

  std::string where() const;  // "rank 1 of 4"
  // Broadcasts each bucket from its owner into the parameters, all in flight at once.
  void broadcast(const std::vector<Bucket>& buckets);
  // Steps the local optimizer on these (owned) parameters only.
  void step_only(const std::vector<size_t>& indices);
  torch::optim::OptimizerParamState* state_of(size_t index) const;
};

namespace detail {

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
