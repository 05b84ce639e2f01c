// ZeroOptions::elastic: each rank keeps a replica of the next rank's shard,
// stepped beside its own from the same averaged gradients, so that the state
// of one lost rank lives on elsewhere; and the per-parameter access elastic
// training moves states with (src/elastic/zero_shards.cpp).
#include "zero/zero_impl.h"

#include "compat/torch_compat.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <sstream>

namespace ddp {

void ZeroRedundancyOptimizer::Impl::step_replica(const std::vector<size_t>& indices,
                                                 const std::vector<at::Tensor>& grads) {
  std::vector<size_t> slots;  // positions in `replica`
  if (indices.empty()) {
    for (size_t k = 0; k < replica.size(); ++k) slots.push_back(k);
  } else {
    for (size_t i : indices) {
      slots.push_back(
          static_cast<size_t>(std::find(replica.begin(), replica.end(), i) - replica.begin()));
    }
  }
  {
    at::NoGradGuard no_grad;
    for (size_t s = 0; s < slots.size(); ++s) {
      const size_t k = slots[s], i = replica[k];
      replica_params[k].copy_(params[i]);  // the value the owner steps from
      replica_params[k].mutable_grad() = grads.empty() ? params[i].grad() : grads[s];
    }
  }
  std::vector<std::pair<size_t, at::Tensor>> stepped;
  for (size_t k : slots) stepped.emplace_back(group_of[replica[k]], replica_params[k]);
  step_subset(*replica_optimizer, stepped);
  for (size_t k : slots) replica_params[k].mutable_grad() = at::Tensor();
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
  auto it = std::find(replica.begin(), replica.end(), index);
  if (it == replica.end()) return {nullptr, {}};
  return {&replica_optimizer->state(), replica_params[it - replica.begin()]};
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
