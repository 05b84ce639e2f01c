// ZeroRedundancyOptimizer: the split, the step and the broadcast of updated
// parameters (see include/ddp/zero.h); checkpoints are in checkpoint.cpp.
#include "zero/zero_impl.h"

#include "compat/torch_compat.h"

#include <ddp/errors.h>
#include <ddp/init.h>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <numeric>
#include <unordered_map>
#include <utility>

namespace ddp {
namespace detail {

std::vector<int> partition_by_size(const std::vector<int64_t>& numels, int world) {
  std::vector<size_t> order(numels.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  std::vector<int64_t> load(world, 0);
  std::vector<int> owner(numels.size(), 0);
  for (size_t i : order) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = r;
    load[r] += numels[i];
  }
  return owner;
}

}  // namespace detail

void ZeroRedundancyOptimizer::Impl::check_sharded() const {
  if (!group) {
    throw InvalidArgument(
        ErrorContext{-1, 0, "", "ZeroRedundancyOptimizer", {}},
        "made with ZeroOptions().elastic(true), it is sharded by "
        "ddp::ElasticRunner at each generation; use it inside the runner's step function");
  }
}

ErrorContext ZeroRedundancyOptimizer::Impl::context(std::string operation) const {
  check_sharded();
  return group->error_context(std::move(operation));
}

torch::optim::OptimizerParamState* ZeroRedundancyOptimizer::Impl::state_of(size_t index) const {
  auto& state = optimizer->state();
  auto it = state.find(compat::optimizer_state_key(state, params[index]));
  return it == state.end() ? nullptr : it->second.get();
}

namespace {

// A parameter this large is broadcast alone and in place; coalescing pays
// for small ones only (one collective's latency against two copies).
constexpr int64_t kDirectBytes = 1 << 20;

std::vector<torch::optim::OptimizerParamGroup> clone_groups(
    const std::vector<torch::optim::OptimizerParamGroup>& groups) {
  return groups;  // the copy constructor clones the options
}

// Parameters that cannot be sharded, found on this rank; "" when none.
std::string local_error(const std::vector<at::Tensor>& params) {
  std::unordered_map<const void*, size_t> seen;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined()) return "parameter #" + std::to_string(i) + " is undefined";
    if (!params[i].is_leaf()) {
      return "parameter #" + std::to_string(i) +
             " is not a leaf tensor (an optimizer updates "
             "leaves only: pass the module's parameters, not results computed from them)";
    }
    auto [it, fresh] = seen.emplace(params[i].unsafeGetTensorImpl(), i);
    if (!fresh) {
      return "parameter #" + std::to_string(i) + " is parameter #" + std::to_string(it->second) +
             " again; each parameter must appear once over all param groups";
    }
  }
  return "";
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(
    std::vector<torch::optim::OptimizerParamGroup> groups,
    const torch::optim::OptimizerOptions& defaults, ZeroWrapped wrapped, ZeroOptions options)
    : torch::optim::Optimizer(clone_groups(groups), defaults.clone()),
      impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.overlap = options.overlap_with_ddp();
  m.elastic = options.elastic();
  m.bucket_cap_mb = options.bucket_cap_mb();
  m.wrapped = std::move(wrapped);
  if (options.bucket_cap_mb() < 0) {
    throw InvalidArgument(
        ErrorContext{-1, 0, "", "ZeroRedundancyOptimizer", {}},
        "bucket_cap_mb must be >= 0, got " + std::to_string(options.bucket_cap_mb()));
  }
  if (m.elastic && options.process_group()) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "ZeroRedundancyOptimizer", {}},
                          "ZeroOptions().elastic(true) takes no process_group: "
                          "ddp::ElasticRunner shards it over each generation's group");
  }
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    for (const auto& p : param_groups_[g].params()) {
      m.params.push_back(p);
      m.group_of.push_back(g);
    }
  }
  for (size_t i = 0; i < m.params.size(); ++i) {
    m.index_of.emplace(m.params[i].unsafeGetTensorImpl(), i);
  }
  if (m.elastic) {
    const std::string error = local_error(m.params);
    if (!error.empty()) {
      throw InvalidArgument(ErrorContext{-1, 0, "", "ZeroRedundancyOptimizer", {}}, error);
    }
    return;  // sharded by the ElasticRunner
  }
  auto group = options.process_group() ? options.process_group() : default_process_group();
  detail::check_same_on_every_rank(*group, m.wrapped.name, m.params, m.group_of,
                                   local_error(m.params));
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> group_options;
  for (const auto& g : param_groups_) group_options.push_back(g.options().clone());
  m.shard(std::move(group), group_options, {});
}

void ZeroRedundancyOptimizer::Impl::shard(
    ProcessGroupPtr new_group,
    const std::vector<std::unique_ptr<torch::optim::OptimizerOptions>>& options,
    std::map<size_t, StatePtr> states) {
  group = std::move(new_group);
  const int rank = group->rank(), world = group->size();
  std::vector<int64_t> numels;
  for (const auto& p : params) numels.push_back(p.numel());
  owner = detail::partition_by_size(numels, world);

  // This rank's optimizer: the same groups (options included), its shard only;
  // elastic, the replica's: the next rank's shard.
  const int next = (rank + 1) % world;
  const bool replicated = elastic && world > 1;
  std::vector<torch::optim::OptimizerParamGroup> shard_groups, replica_groups;
  local.assign(options.size(), {});
  replica.clear();
  std::vector<std::pair<at::Tensor, StatePtr>> local_states, replica_states;
  for (size_t g = 0; g < options.size(); ++g) {
    std::vector<at::Tensor> mine, theirs;
    for (size_t i = 0; i < params.size(); ++i) {
      if (group_of[i] != g) continue;
      auto state = states.find(i);
      if (owner[i] == rank) {
        mine.push_back(params[i]);
        local[g].push_back(i);
        if (state != states.end() && state->second) {
          local_states.emplace_back(params[i], std::move(state->second));
        }
      } else if (replicated && owner[i] == next) {
        theirs.push_back(params[i]);
        replica.push_back(i);
        if (state != states.end() && state->second) {
          replica_states.emplace_back(params[i], std::move(state->second));
        }
      }
    }
    shard_groups.emplace_back(std::move(mine), options[g]->clone());
    replica_groups.emplace_back(std::move(theirs), options[g]->clone());
  }
  optimizer = wrapped.make(std::move(shard_groups));
  replica_optimizer = replicated ? wrapped.make(std::move(replica_groups)) : nullptr;
  for (auto& [param, state] : local_states) {
    auto& map = optimizer->state();
    map[compat::optimizer_state_key(map, param)] = std::move(state);
  }
  for (auto& [param, state] : replica_states) {
    auto& map = replica_optimizer->state();
    map[compat::optimizer_state_key(map, param)] = std::move(state);
  }

  // Buckets per owner and dtype, filled in parameter order up to the cap.
  buckets.clear();
  const int64_t cap = static_cast<int64_t>(bucket_cap_mb * 1024 * 1024);
  for (int r = 0; r < world; ++r) {
    std::vector<Bucket> open;  // one being filled per dtype
    for (size_t i = 0; i < params.size(); ++i) {
      if (owner[i] != r) continue;
      const auto dtype = params[i].scalar_type();
      auto it =
          std::find_if(open.begin(), open.end(), [&](const Bucket& b) { return b.dtype == dtype; });
      const int64_t bytes = params[i].numel() * static_cast<int64_t>(params[i].element_size());
      const int64_t item = static_cast<int64_t>(params[i].element_size());
      if (bytes >= kDirectBytes) {  // alone, broadcast in place: no copy to gain from
        buckets.push_back(Bucket{r, dtype, params[i].numel(), {i}});
        continue;
      }
      if (it != open.end() && (it->numel * item + bytes > cap)) {
        buckets.push_back(std::move(*it));
        open.erase(it);
        it = open.end();
      }
      if (it == open.end()) {
        open.push_back(Bucket{r, dtype, 0, {}});
        it = open.end() - 1;
      }
      it->params.push_back(i);
      it->numel += params[i].numel();
    }
    for (auto& b : open) buckets.push_back(std::move(b));
  }
  consolidated = false;
  updated = 0;
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

void ZeroRedundancyOptimizer::sync_options() {
  // Options may have changed (a learning-rate schedule) since the last step.
  for (auto* optimizer : {impl_->optimizer.get(), impl_->replica_optimizer.get()}) {
    if (!optimizer) continue;
    auto& groups = optimizer->param_groups();
    for (size_t g = 0; g < param_groups_.size(); ++g) {
      groups[g].set_options(param_groups_[g].options().clone());
    }
  }
}

torch::Tensor ZeroRedundancyOptimizer::step(LossClosure closure) {
  if (join()) join()->notify(*this);  // in a Join: checks the module comes first
  return step_shard(std::move(closure));
}

ProcessGroupPtr ZeroRedundancyOptimizer::join_process_group() const {
  impl_->check_sharded();
  return impl_->group;
}

// Join: this rank is out of inputs; DDP's shadow iteration left it the
// averaged gradients (or, with overlap_with_ddp, already stepped its shards).
void ZeroRedundancyOptimizer::shadow_iteration(const JoinIteration&) { step_shard(nullptr); }

torch::Tensor ZeroRedundancyOptimizer::step_shard(LossClosure closure) {
  Impl& m = *impl_;
  m.check_sharded();
  if (m.overlap) {
    // The hook did the work during backward; make sure it did all of it.
    const size_t updated = std::exchange(m.updated, 0);
    if (closure) {
      throw InvalidArgument(m.context("ZeroRedundancyOptimizer::step"),
                            "overlap_with_ddp updates parameters during backward; step() "
                            "takes no closure then");
    }
    if (updated != m.params.size()) {
      throw InvalidArgument(
          m.context("ZeroRedundancyOptimizer::step"),
          "with overlap_with_ddp: " + std::to_string(updated) +
              " parameter updates since the last step(), expected " +
              std::to_string(m.params.size()) +
              " (each parameter once); register the hook with "
              "model->register_comm_hook(&optimizer, ddp::zero_hook) and call step() once after "
              "each synchronized backward");
    }
    ++m.steps;
    return {};
  }
  sync_options();
  ++m.updates;
  torch::Tensor loss = m.optimizer->step(std::move(closure));
  if (m.replica_optimizer) m.step_replica({}, {});
  ++m.steps;
  m.broadcast(m.buckets);
  return loss;
}

void ZeroRedundancyOptimizer::Impl::broadcast(const std::vector<Bucket>& to_send) {
  at::NoGradGuard no_grad;
  const int rank = group->rank();
  std::vector<at::Tensor> flats;
  std::vector<WorkPtr> works;
  std::vector<bool> in_place;
  for (const auto& b : to_send) {
    at::Tensor flat;
    const at::Tensor& first = params[b.params.front()];
    in_place.push_back(b.params.size() == 1 && first.is_contiguous());
    if (in_place.back()) {
      flat = first.detach();  // in place, on the owner and the receivers alike
    } else if (b.root == rank) {
      std::vector<at::Tensor> parts;
      for (size_t i : b.params) parts.push_back(params[i].detach().reshape({-1}));
      flat = at::cat(parts);
    } else {
      flat = at::empty({b.numel}, first.options().requires_grad(false));
    }
    works.push_back(group->broadcast(flat, b.root));
    flats.push_back(flat);
  }
  for (size_t k = 0; k < to_send.size(); ++k) {
    works[k]->wait();
    const auto& b = to_send[k];
    if (b.root == rank || in_place[k]) continue;
    int64_t offset = 0;
    for (size_t i : b.params) {
      const int64_t n = params[i].numel();
      params[i].detach().copy_(flats[k].narrow(0, offset, n).view_as(params[i]));
      offset += n;
    }
  }
}

int ZeroRedundancyOptimizer::owner(size_t index) const {
  impl_->check_sharded();
  if (index >= impl_->owner.size()) {
    throw InvalidArgument(
        ErrorContext{-1, 0, "", "ZeroRedundancyOptimizer::owner", {}},
        "parameter #" + std::to_string(index) + " out of " + std::to_string(impl_->owner.size()));
  }
  return impl_->owner[index];
}

torch::optim::Optimizer& ZeroRedundancyOptimizer::local_optimizer() {
  impl_->check_sharded();
  return *impl_->optimizer;
}

int64_t ZeroRedundancyOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (auto* optimizer : {impl_->optimizer.get(), impl_->replica_optimizer.get()}) {
    if (!optimizer) continue;  // not sharded yet, or no replica
    for (const auto& item : optimizer->state()) {
      for (const auto& t : impl_->wrapped.state_tensors(*item.second)) {
        if (t.defined()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
      }
    }
  }
  return bytes;
}

}  // namespace ddp
