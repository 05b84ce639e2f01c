// ElasticState: the in-memory commit a failed step goes back to, and the
// commit as checkpoint bytes for the members of a new generation.
//
// A commit copies into tensors it keeps from one commit to the next (no
// allocation after the first): the parameters and buffers, and the state of
// libtorch's optimizers (SGD, Adam, AdamW, Adagrad, RMSprop) field by
// field. Any other optimizer's state goes through Optimizer::save into
// bytes, which costs a serialization per commit.
#include <ddp/elastic.h>

#include "checkpoint/checkpoint_archive.h"
#include "compat/torch_compat.h"

#include <ddp/errors.h>
#include <ddp/zero.h>

#include <torch/nn/module.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <sstream>

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

// One optimizer's per-parameter state type, its fields copied one by one.
template <typename S>
bool copy_fields(const OptimizerParamState& from, std::unique_ptr<OptimizerParamState>& into) {
  const auto* f = dynamic_cast<const S*>(&from);
  if (!f) return false;
  if (!into || !dynamic_cast<S*>(into.get())) into = std::make_unique<S>();
  auto& t = static_cast<S&>(*into);
  auto tensor = [](const at::Tensor& source, const at::Tensor& current) {
    at::Tensor out = current;
    copy_tensor(source, out);
    return out;
  };
  if constexpr (std::is_same_v<S, torch::optim::SGDParamState>) {
    t.momentum_buffer(tensor(f->momentum_buffer(), t.momentum_buffer()));
  } else if constexpr (std::is_same_v<S, torch::optim::AdagradParamState>) {
    t.step(f->step());
    t.sum(tensor(f->sum(), t.sum()));
  } else if constexpr (std::is_same_v<S, torch::optim::RMSpropParamState>) {
    t.step(f->step());
    t.square_avg(tensor(f->square_avg(), t.square_avg()));
    t.momentum_buffer(tensor(f->momentum_buffer(), t.momentum_buffer()));
    t.grad_avg(tensor(f->grad_avg(), t.grad_avg()));
  } else {  // Adam, AdamW
    t.step(f->step());
    t.exp_avg(tensor(f->exp_avg(), t.exp_avg()));
    t.exp_avg_sq(tensor(f->exp_avg_sq(), t.exp_avg_sq()));
    t.max_exp_avg_sq(tensor(f->max_exp_avg_sq(), t.max_exp_avg_sq()));
  }
  return true;
}

bool copy_param_state(const OptimizerParamState& from, std::unique_ptr<OptimizerParamState>& into) {
  using namespace torch::optim;
  return copy_fields<SGDParamState>(from, into) || copy_fields<AdamParamState>(from, into) ||
         copy_fields<AdamWParamState>(from, into) || copy_fields<AdagradParamState>(from, into) ||
         copy_fields<RMSpropParamState>(from, into);
}

std::vector<at::Tensor> module_tensors(torch::nn::Module& module) {
  std::vector<at::Tensor> out = module.parameters(true);
  for (auto& b : module.buffers(true)) out.push_back(b);
  return out;
}

}  // namespace

struct ElasticState::Snapshot {
  int64_t iteration = -1;  // training.iteration committed; -1: none
  TrainingState training;
  std::vector<at::Tensor> tensors;  // the module's parameters, then buffers
  // Per parameter (in param_groups order): its optimizer state or null.
  std::vector<std::unique_ptr<OptimizerParamState>> states;
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> group_options;
  std::string optimizer_bytes;  // instead of `states`, for other optimizers
};

ElasticState::ElasticState(std::shared_ptr<torch::nn::Module> module,
                           torch::optim::Optimizer& optimizer, ModelFactory make_model)
    : module_(std::move(module)),
      optimizer_(optimizer),
      make_model_(std::move(make_model)),
      snapshot_(std::make_unique<Snapshot>()) {
  if (dynamic_cast<ZeroRedundancyOptimizer*>(&optimizer)) {
    throw InvalidArgument(
        "ddp: ElasticState: a ZeroRedundancyOptimizer's shards cannot be re-partitioned in "
        "process yet; use a whole optimizer (ZeRO's on-disk checkpoint and ddprun "
        "--max-restarts recover ZeRO jobs)");
  }
}

ElasticState::~ElasticState() = default;

int64_t ElasticState::committed_iteration() const { return snapshot_->iteration; }

void ElasticState::commit() {
  at::NoGradGuard no_grad;
  Snapshot& s = *snapshot_;
  const auto live = module_tensors(*module_);
  s.tensors.resize(live.size());
  for (size_t i = 0; i < live.size(); ++i) copy_tensor(live[i], s.tensors[i]);

  auto& state = optimizer_.state();
  size_t i = 0;
  bool fast = true;
  for (const auto& group : optimizer_.param_groups()) {
    for (const auto& p : group.params()) {
      if (s.states.size() <= i) s.states.emplace_back();
      auto found = state.find(compat::optimizer_state_key(state, p));
      if (found == state.end()) {
        s.states[i].reset();
      } else if (!copy_param_state(*found->second, s.states[i])) {
        fast = false;
      }
      ++i;
    }
  }
  s.states.resize(i);
  s.group_options.clear();
  for (const auto& group : optimizer_.param_groups()) {
    s.group_options.push_back(group.has_options() ? group.options().clone() : nullptr);
  }
  s.optimizer_bytes.clear();
  if (!fast) {
    s.states.clear();
    torch::serialize::OutputArchive archive;
    optimizer_.save(archive);
    std::ostringstream out;
    archive.save_to(out);
    s.optimizer_bytes = out.str();
  }
  s.training.epoch = training.epoch;
  s.training.iteration = training.iteration;
  s.training.epoch_samples = training.epoch_samples;
  s.training.extra.clear();
  for (const auto& [name, t] : training.extra) s.training.extra[name] = t.detach().clone();
  s.iteration = training.iteration;
}

void ElasticState::restore() {
  Snapshot& s = *snapshot_;
  if (s.iteration < 0) return;  // nothing committed: the state is as it was given
  at::NoGradGuard no_grad;
  const auto live = module_tensors(*module_);
  for (size_t i = 0; i < live.size(); ++i) live[i].copy_(s.tensors[i]);

  if (!s.optimizer_bytes.empty()) {
    torch::serialize::InputArchive archive;
    archive.load_from(s.optimizer_bytes.data(), s.optimizer_bytes.size());
    optimizer_.load(archive);
  } else {
    auto& state = optimizer_.state();
    size_t i = 0;
    for (const auto& group : optimizer_.param_groups()) {
      for (const auto& p : group.params()) {
        const auto key = compat::optimizer_state_key(state, p);
        if (!s.states[i]) {
          state.erase(key);
        } else {
          copy_param_state(*s.states[i], state[key]);
        }
        ++i;
      }
    }
  }
  auto& groups = optimizer_.param_groups();
  for (size_t g = 0; g < groups.size() && g < s.group_options.size(); ++g) {
    if (s.group_options[g]) groups[g].set_options(s.group_options[g]->clone());
  }
  training.epoch = s.training.epoch;
  training.iteration = s.training.iteration;
  training.epoch_samples = s.training.epoch_samples;
  training.extra.clear();
  for (const auto& [name, t] : s.training.extra) training.extra[name] = t.clone();
}

std::string ElasticState::serialize() const {
  return checkpoint_detail::serialize_checkpoint(*module_, optimizer_, training, at::Tensor());
}

void ElasticState::load(const std::string& bytes, const ProcessGroup& group) {
  auto pending = checkpoint_detail::parse_checkpoint(bytes.data(), bytes.size(), *module_,
                                                     optimizer_, /*restore_rng=*/false,
                                                     group.rank(), group.size());
  pending.apply();
  training = pending.state;
}

}  // namespace ddp
