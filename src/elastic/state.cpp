// ElasticState: the in-memory commit a failed step goes back to, and the
// commit as checkpoint bytes for the members of a new generation (an elastic
// ZeRO's shards travel apart: zero_shards.cpp).
//
// A full copy goes into tensors kept from one copy to the next (no
// allocation for them after the first): the parameters and buffers, and the
// state of libtorch's optimizers (SGD, Adam, AdamW, Adagrad, RMSprop) field
// by field. A step boundary copies the buffers the same way and clones the
// small things (extra tensors, the param groups' options). Another optimizer's state cannot be
// copied generically (libtorch's OptimizerParamState has no deep copy, and Optimizer::save is empty
// unless overridden; LBFGS's cannot be saved at all): a commit refuses it, naming its type, rather
// than restore a state that is not the committed one.
#include <ddp/elastic.h>

#include "checkpoint/checkpoint_archive.h"
#include "compat/torch_compat.h"
#include "elastic/zero_handover.h"
#include "zero/zero_impl.h"

#include <ddp/errors.h>
#include <ddp/zero.h>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <c10/util/Type.h>

#include <typeinfo>

namespace ddp {
namespace {

using torch::optim::OptimizerParamState;

// `into` holding a copy of `from`: `into`'s own memory when it has the
// same geometry and is not `from` itself, else a fresh clone.
void copy_tensor(const at::Tensor& from, at::Tensor& into) {
  if (!from.defined()) {
    into = at::Tensor();
  } else if (into.defined() && !into.is_same(from) && into.sizes() == from.sizes() &&
             into.dtype() == from.dtype() && into.device() == from.device() &&
             into.data_ptr() != from.data_ptr()) {
    into.copy_(from);
  } else {
    into = from.detach().clone();
  }
}

// The fields of libtorch's per-parameter optimizer states, one list per
// type: its tensors and its step count (SGD's has none).
struct StateFields {
  std::vector<at::Tensor*> tensors;
  int64_t* step = nullptr;
};

template <typename S>
StateFields fields_of(S& s) {
  if constexpr (std::is_same_v<S, torch::optim::SGDParamState>) {
    return {{&s.momentum_buffer()}, nullptr};
  } else if constexpr (std::is_same_v<S, torch::optim::AdagradParamState>) {
    return {{&s.sum()}, &s.step()};
  } else if constexpr (std::is_same_v<S, torch::optim::RMSpropParamState>) {
    return {{&s.square_avg(), &s.momentum_buffer(), &s.grad_avg()}, &s.step()};
  } else {  // Adam, AdamW
    return {{&s.exp_avg(), &s.exp_avg_sq(), &s.max_exp_avg_sq()}, &s.step()};
  }
}

template <typename S, typename F>
bool visit_as(OptimizerParamState& state, F& f) {
  auto* typed = dynamic_cast<S*>(&state);
  if (typed) f(*typed);
  return typed != nullptr;
}

// Calls f(state as its type) for the types above; false for another type.
template <typename F>
bool with_known_type(OptimizerParamState& state, F&& f) {
  using namespace torch::optim;
  return visit_as<SGDParamState>(state, f) || visit_as<AdamParamState>(state, f) ||
         visit_as<AdamWParamState>(state, f) || visit_as<AdagradParamState>(state, f) ||
         visit_as<RMSpropParamState>(state, f);
}

[[noreturn]] void refuse(const OptimizerParamState& state) {
  throw InvalidArgument(ErrorContext{-1, 0, "", "ElasticState::commit", {}},
                        "cannot copy an optimizer state of type " +
                            c10::demangle(typeid(state).name()) +
                            "; elastic training supports libtorch's SGD, Adam, AdamW, Adagrad and "
                            "RMSprop");
}

// `into` holding a copy of `from`, field by field (into's tensors reused).
bool copy_param_state(OptimizerParamState& from, std::unique_ptr<OptimizerParamState>& into) {
  return with_known_type(from, [&](auto& source) {
    using S = std::decay_t<decltype(source)>;
    if (!into || !dynamic_cast<S*>(into.get())) into = std::make_unique<S>();
    const StateFields f = fields_of(source), t = fields_of(static_cast<S&>(*into));
    for (size_t i = 0; i < f.tensors.size(); ++i) copy_tensor(*f.tensors[i], *t.tensors[i]);
    if (f.step) *t.step = *f.step;
  });
}

// What moves when the optimizer steps a parameter with state: its state's
// step count, and the version counters of its state tensors (updated in
// place: SGD's momentum, Adam's averages, ...). The parameter's own counter
// is not enough: libtorch's SGD updates it through .data(), which has a
// counter of its own.
void mark_progress(OptimizerParamState& state, std::vector<int64_t>& marks) {
  const bool known = with_known_type(state, [&](auto& typed) {
    const StateFields f = fields_of(typed);
    if (f.step) marks.push_back(*f.step);
    for (const at::Tensor* t : f.tensors) marks.push_back(t->defined() ? t->_version() : -1);
  });
  if (!known) refuse(state);
}

// A step boundary, cheap enough to record at every one: the counters, the
// buffers (BatchNorm's statistics change in forward), the param groups'
// options, and what tells whether the optimizer has stepped since (marks:
// per parameter, its version counter, whether it has optimizer state, and
// that state's progress).
struct Boundary {
  int64_t iteration = -1;  // -1: none recorded
  TrainingState training;
  std::vector<at::Tensor> buffers;
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> group_options;
  std::vector<int64_t> marks;
  bool any_state = false;
};

// A full copy: a boundary with the parameters and the optimizer's state.
struct FullCopy {
  Boundary boundary;
  std::vector<at::Tensor> parameters;
  // Per parameter (in param_groups order): whether this process keeps its
  // optimizer state (with ZeRO, its shard's and its replica's only), and
  // that state or null.
  std::vector<bool> kept;
  std::vector<std::unique_ptr<OptimizerParamState>> states;
};

}  // namespace

struct ElasticState::Snapshot {
  Boundary last;
  FullCopy copy;
  int64_t committed = -1;
};

namespace {

std::vector<at::Tensor> parameters_of(const torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> out;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) out.push_back(p);
  }
  return out;
}

using StateMap = detail::ZeroAccess::Impl::StateMap;

// Where each parameter's optimizer state lives in this process, in
// param_groups order: the optimizer's own map and the tensor it is keyed
// by, or with ZeRO the shard's or the replica's; null: kept elsewhere.
std::vector<std::pair<StateMap*, at::Tensor>> state_homes(torch::optim::Optimizer& optimizer,
                                                          ZeroRedundancyOptimizer* zero) {
  std::vector<std::pair<StateMap*, at::Tensor>> homes;
  const auto params = parameters_of(optimizer);
  for (size_t i = 0; i < params.size(); ++i) {
    homes.push_back(zero ? detail::ZeroAccess::of(*zero).home_of(i)
                         : std::make_pair(&optimizer.state(), params[i]));
  }
  return homes;
}

std::vector<int64_t> progress_marks(torch::optim::Optimizer& optimizer,
                                    ZeroRedundancyOptimizer* zero) {
  std::vector<int64_t> marks;
  if (zero) {
    // ZeRO counts the updates it began; a parameter's version also moves
    // when a new generation's state is loaded into it.
    marks.push_back(detail::ZeroAccess::of(*zero).updates);
    for (const auto& p : parameters_of(optimizer)) marks.push_back(p._version());
    return marks;
  }
  auto& state = optimizer.state();
  for (const auto& p : parameters_of(optimizer)) {
    marks.push_back(p._version());
    auto found = state.find(compat::optimizer_state_key(state, p));
    marks.push_back(found == state.end() ? 0 : 1);
    if (found != state.end()) mark_progress(*found->second, marks);
  }
  return marks;
}

// A param group that keeps no state: SGD's without momentum.
bool has_stateless_group(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    if (!group.has_options()) continue;
    const auto* sgd = dynamic_cast<const torch::optim::SGDOptions*>(&group.options());
    if (sgd && sgd->momentum() == 0) return true;
  }
  return false;
}

void record(Boundary& b, torch::nn::Module& module, torch::optim::Optimizer& optimizer,
            ZeroRedundancyOptimizer* zero, const TrainingState& training) {
  const auto buffers = module.buffers(true);
  b.buffers.resize(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) copy_tensor(buffers[i], b.buffers[i]);
  b.group_options.clear();
  for (const auto& group : optimizer.param_groups()) {
    b.group_options.push_back(group.has_options() ? group.options().clone() : nullptr);
  }
  b.marks = progress_marks(optimizer, zero);
  b.any_state = zero || !optimizer.state().empty();
  b.training.epoch = training.epoch;
  b.training.iteration = training.iteration;
  b.training.epoch_samples = training.epoch_samples;
  b.training.extra.clear();
  for (const auto& [name, t] : training.extra) b.training.extra[name] = t.detach().clone();
  b.iteration = training.iteration;
}

// Whether the optimizer has not touched a parameter or its state since `b`.
bool unchanged_since(const Boundary& b, torch::optim::Optimizer& optimizer,
                     ZeroRedundancyOptimizer* zero) {
  return b.any_state && progress_marks(optimizer, zero) == b.marks;
}

void apply(const Boundary& b, torch::nn::Module& module, torch::optim::Optimizer& optimizer,
           TrainingState& training) {
  const auto buffers = module.buffers(true);
  for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(b.buffers[i]);
  auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size() && g < b.group_options.size(); ++g) {
    if (b.group_options[g]) groups[g].set_options(b.group_options[g]->clone());
  }
  training.epoch = b.training.epoch;
  training.iteration = b.training.iteration;
  training.epoch_samples = b.training.epoch_samples;
  training.extra.clear();
  for (const auto& [name, t] : b.training.extra) training.extra[name] = t.clone();
}

}  // namespace

ElasticState::ElasticState(std::shared_ptr<torch::nn::Module> module,
                           torch::optim::Optimizer& optimizer, ModelFactory make_model)
    : module_(std::move(module)),
      optimizer_(optimizer),
      make_model_(std::move(make_model)),
      snapshot_(std::make_unique<Snapshot>()),
      zero_handover_(std::make_unique<ZeroHandover>()) {
  zero_ = dynamic_cast<ZeroRedundancyOptimizer*>(&optimizer);
  if (zero_ && !detail::ZeroAccess::of(*zero_).elastic) {
    throw InvalidArgument(
        ErrorContext{-1, 0, "", "ElasticState", {}},
        "this ZeroRedundancyOptimizer is bound to one process group; make it "
        "with ZeroOptions().elastic(true) so that the runner re-shards it over each generation");
  }
}

ElasticState::~ElasticState() = default;

int64_t ElasticState::committed_iteration() const { return snapshot_->committed; }

void ElasticState::commit(bool full) {
  at::NoGradGuard no_grad;
  Snapshot& s = *snapshot_;
  // Without optimizer state (before the first step, or a param group of
  // SGD without momentum) nothing would show a step of the optimizer: copy
  // in full. ZeRO counts its updates.
  if (full || (!zero_ && (optimizer_.state().empty() || has_stateless_group(optimizer_)))) {
    FullCopy& c = s.copy;
    const auto params = parameters_of(optimizer_);
    c.parameters.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) copy_tensor(params[i], c.parameters[i]);
    const auto homes = state_homes(optimizer_, zero_);
    c.kept.assign(params.size(), false);
    c.states.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      auto [map, key] = homes[i];
      c.kept[i] = map != nullptr;
      c.states[i].reset();
      if (!map) continue;
      auto found = map->find(compat::optimizer_state_key(*map, key));
      if (found != map->end() && !copy_param_state(*found->second, c.states[i])) {
        refuse(*found->second);
      }
    }
    record(c.boundary, *module_, optimizer_, zero_, training);
  }
  record(s.last, *module_, optimizer_, zero_, training);
  s.committed = training.iteration;
}

void ElasticState::restore() {
  Snapshot& s = *snapshot_;
  if (s.last.iteration < 0) return;  // nothing committed: the state is as it was given
  at::NoGradGuard no_grad;
  if (unchanged_since(s.last, optimizer_, zero_)) {
    // The step failed before the optimizer stepped: the parameters and the
    // optimizer's state are the boundary's; the rest comes back.
    apply(s.last, *module_, optimizer_, training);
    s.committed = s.last.iteration;
    return;
  }
  restore_full();
}

void ElasticState::restore_full() {
  Snapshot& s = *snapshot_;
  const FullCopy& c = s.copy;
  if (c.boundary.iteration < 0) {
    throw InvalidArgument(
        ErrorContext{-1, 0, "", "ElasticState::restore", {}},
        "the optimizer stepped since the last commit, which was not "
        "a full copy, and there is none older: commit(/*full=*/true) at least once");
  }
  at::NoGradGuard no_grad;
  const auto params = parameters_of(optimizer_);
  const auto homes = state_homes(optimizer_, zero_);
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].copy_(c.parameters[i]);
    auto [map, key] = homes[i];
    if (!c.kept[i] || !map) continue;  // with ZeRO: a state kept by another member
    const auto k = compat::optimizer_state_key(*map, key);
    if (!c.states[i]) {
      map->erase(k);
    } else {
      copy_param_state(*c.states[i], (*map)[k]);
    }
  }
  apply(c.boundary, *module_, optimizer_, training);
  record(s.last, *module_, optimizer_, zero_, training);  // the parameters' versions moved
  s.committed = c.boundary.iteration;
}

void ElasticState::passed_boundary(bool full) {
  if (full) commit(/*full=*/true);
  zero_handover_->states.clear();
  zero_handover_->step = -2;
}

int64_t ElasticState::full_copy_iteration() const { return snapshot_->copy.boundary.iteration; }

std::vector<bool> ElasticState::kept_states(bool in_full_copy) const {
  if (in_full_copy) {
    const FullCopy& c = snapshot_->copy;
    return c.boundary.iteration < 0 ? std::vector<bool>(parameters_of(optimizer_).size(), false)
                                    : c.kept;
  }
  if (zero_ && !detail::ZeroAccess::of(*zero_).optimizer) {
    // Not sharded yet: before any commit, no parameter has state, which
    // this process knows; after one (a commit outside the runner), it
    // knows nothing of them.
    return std::vector<bool>(parameters_of(optimizer_).size(), committed_iteration() < 0);
  }
  std::vector<bool> kept;
  for (const auto& home : state_homes(optimizer_, zero_)) kept.push_back(home.first != nullptr);
  return kept;
}

std::string ElasticState::serialize() const {
  return checkpoint_detail::serialize_checkpoint(*module_, zero_ ? nullptr : &optimizer_, training,
                                                 at::Tensor());
}

void ElasticState::load(const std::string& bytes, const ProcessGroup& group) {
  auto pending = checkpoint_detail::parse_checkpoint(
      bytes.data(), bytes.size(), *module_, zero_ ? nullptr : &optimizer_,
      /*restore_rng=*/false, group.rank(), group.size());
  pending.apply();
  training = pending.state;
}

void ElasticState::synchronize(const ProcessGroupPtr& group, const std::string& where) {
  if (zero_) return synchronize_zero(group, where);
  // Every member's committed step; the state of the one furthest ahead (the
  // lowest rank among equals), as a checkpoint carries it.
  std::vector<at::Tensor> all;
  for (int r = 0; r < group->size(); ++r) all.push_back(at::empty({1}, at::kLong));
  group->allgather(all, at::tensor({committed_iteration()}, at::kLong))->wait();
  int source = 0;
  for (int r = 1; r < group->size(); ++r) {
    if (all[r].item<int64_t>() > all[source].item<int64_t>()) source = r;
  }
  const std::string bytes = checkpoint_detail::broadcast_bytes(
      *group, source, group->rank() == source ? serialize() : "");
  if (group->rank() != source) load(bytes, *group);
}

}  // namespace ddp
