// ZeroOptions::elastic: each rank keeps a replica of the next rank's shard,
// stepped beside its own from the same averaged gradients, so that the state
// of one lost rank lives on elsewhere; and the per-parameter access elastic
// training moves states with (src/elastic/zero_shards.cpp).
#include "zero/zero_impl.h"

#include "compat/torch_compat.h"

#include <ATen/ATen.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <sstream>

namespace ddp {

void ZeroRedundancyOptimizer::Impl::step_replica(const std::vector<size_t>& indices,
                                                 const std::vector<at::Tensor>& grads) {
  // In place, on the parameters themselves: the replica computes exactly
  // what their owner does, and the owner's broadcast, which follows, then
  // writes the same values again. No copy of the next shard is kept.
  const std::vector<size_t>& stepped = indices.empty() ? replica : indices;
  for (size_t k = 0; k < grads.size(); ++k) params[stepped[k]].mutable_grad() = grads[k];
  std::vector<std::pair<size_t, at::Tensor>> subset;
  for (size_t i : stepped) subset.emplace_back(group_of[i], params[i]);
  step_subset(*replica_optimizer, subset);
}

void ZeroRedundancyOptimizer::Impl::step_subset(
    torch::optim::Optimizer& optimizer, const std::vector<std::pair<size_t, at::Tensor>>& subset) {
  auto& groups = optimizer.param_groups();
  std::vector<std::vector<at::Tensor>> all(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) all[g] = std::exchange(groups[g].params(), {});
  for (const auto& [g, p] : subset) groups[g].params().push_back(p);
  struct Restore {
    std::vector<torch::optim::OptimizerParamGroup>& groups;
    std::vector<std::vector<at::Tensor>>& all;
    ~Restore() {
      for (size_t g = 0; g < groups.size(); ++g) groups[g].params() = std::move(all[g]);
    }
  } restore{groups, all};
  optimizer.step();
}

std::pair<ZeroRedundancyOptimizer::Impl::StateMap*, at::Tensor>
ZeroRedundancyOptimizer::Impl::home_of(size_t index) {
  if (!optimizer) return {nullptr, {}};  // not sharded
  if (owner[index] == group->rank()) return {&optimizer->state(), params[index]};
  if (std::find(replica.begin(), replica.end(), index) == replica.end()) return {nullptr, {}};
  return {&replica_optimizer->state(), params[index]};
}

std::string ZeroRedundancyOptimizer::Impl::state_to_bytes(
    const torch::optim::OptimizerParamState& state) {
  torch::serialize::OutputArchive archive;
  state.serialize(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

ZeroRedundancyOptimizer::Impl::StatePtr ZeroRedundancyOptimizer::Impl::state_from_bytes(
    const std::string& bytes) const {
  std::istringstream stream(bytes);
  torch::serialize::InputArchive in;
  in.load_from(stream);
  auto state = wrapped.make_state();
  state->serialize(in);
  return state;
}

}  // namespace ddp
