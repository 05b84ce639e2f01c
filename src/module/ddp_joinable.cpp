// DistributedDataParallel as a Joinable (join.h): what a rank out of inputs
// does in each iteration the others still train, and when all are done.
#include <ddp/distributed_data_parallel.h>

#include <ddp/errors.h>
#include <ddp/sync_batchnorm.h>

#include "agreement/model_sync.h"
#include "sync_batchnorm/join_shadow.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <memory>
#include <string>

namespace ddp {
namespace detail {
namespace {
thread_local bool join_shadow = false;
}  // namespace

bool in_join_shadow() { return join_shadow; }
JoinShadowScope::JoinShadowScope() : previous_(join_shadow) { join_shadow = true; }
JoinShadowScope::~JoinShadowScope() { join_shadow = previous_; }

}  // namespace detail

namespace {

// The name of the first SyncBatchNorm in `module`'s tree (in training mode
// only, if `training`), or "". It runs at every no_sync or no-grad forward
// inside a Join: names are built only once one is found.
std::string first_sync_batchnorm(const torch::nn::Module& module, bool training = false) {
  const auto is_one = [training](const std::shared_ptr<torch::nn::Module>& m) {
    return dynamic_cast<const SyncBatchNormImpl*>(m.get()) && (!training || m->is_training());
  };
  const auto all = module.modules();
  if (std::none_of(all.begin(), all.end(), is_one)) return "";
  for (const auto& item : module.named_modules()) {
    if (is_one(item.value())) return item.key().empty() ? "(the module itself)" : item.key();
  }
  return "";
}

}  // namespace

// The others broadcast buffers in their forward, then run forward and
// backward: the same collectives, in the same order, contributing nothing.
void DistributedDataParallelImpl::shadow_iteration(const JoinIteration& iteration) {
  if (options_.broadcast_buffers() && !buffers_.empty()) {
    detail::broadcast_coalesced(*group_, buffers_, iteration.lowest_training_rank());
  }
  if (join_shadow_forward_) {
    replay_join_shadow_batch();
  } else {
    reducer_->shadow_iteration();
  }
}

void DistributedDataParallelImpl::replay_join_shadow_batch() {
  at::AutoGradMode grad_enabled(true);
  std::vector<torch::Tensor> outputs;
  {
    detail::JoinShadowScope shadow;
    outputs = join_shadow_forward_();
  }
  std::vector<torch::Tensor> roots, zeros;
  for (const auto& out : outputs) {
    if (!out.defined() || !out.requires_grad()) continue;
    roots.push_back(out);
    zeros.push_back(torch::zeros_like(out));
  }
  if (roots.empty()) {
    // Nothing more is issued: the replay's forward collectives are out, and
    // zeros in DDP's order would meet the others' backward out of step. The
    // others fail at their timeout, or when this rank's group closes.
    throw InvalidArgument(group_->error_context("Join"),
                          "the forward of set_join_shadow_batch's arguments returned no "
                          "tensor that requires grad, so this rank, out of inputs, cannot replay "
                          "the backward of the ranks that train; give it the arguments of a "
                          "training forward (an empty batch will do)");
  }
  reducer_->prepare_for_shadow_backward(roots);
  // SyncBatchNorm's backward reads the flag its forward saved; the scope
  // covers what backward recomputes (activation checkpointing re-runs forwards).
  detail::JoinShadowScope shadow;
  torch::autograd::backward(roots, zeros);
}

// A forward outside the Join's iterations (no_sync, or grad disabled) whose
// model collectives a rank out of inputs would never replay.
void DistributedDataParallelImpl::check_forward_can_be_shadowed() const {
  if (join()->options().throw_on_early_termination()) return;
  const std::string layer = first_sync_batchnorm(*wrapped_, /*training=*/true);
  if (layer.empty()) return;
  throw InvalidArgument(
      group_->error_context("Join"),
      std::string("a forward ") +
          (require_backward_grad_sync_ ? "with grad disabled" : "under no_sync") +
          " of a model whose SyncBatchNorm '" + layer +
          "' is in training mode: its collectives run outside the iterations that a rank out of "
          "inputs replays, so they could not be shadowed. Inside a Join with SyncBatchNorm, "
          "synchronize every step (no no_sync) and evaluate in eval() mode.");
}

void DistributedDataParallelImpl::finish_join(int last_rank) {
  std::vector<torch::Tensor> state;
  for (const auto& p : wrapped_->parameters()) state.push_back(p);
  state.insert(state.end(), buffers_.begin(), buffers_.end());
  detail::broadcast_coalesced(*group_, state, last_rank);
}

void DistributedDataParallelImpl::check_join_options(const JoinOptions& options) const {
  if (!options.divide_by_initial_world_size() && reducer_->has_comm_hook()) {
    throw InvalidArgument(group_->error_context(),
                          "Join(divide_by_initial_world_size(false)) with a communication "
                          "hook: the hook averages over the whole group, so gradients cannot "
                          "be divided by the ranks that contributed; use the default (true)");
  }
  if (options.throw_on_early_termination() || join_shadow_forward_) return;
  const std::string layer = first_sync_batchnorm(*wrapped_);
  if (!layer.empty()) {
    throw InvalidArgument(
        group_->error_context("Join"),
        "the model holds SyncBatchNorm '" + layer +
            "', whose collectives a rank out of inputs must issue too, in the order the others "
            "do; give the DDP module a batch to replay before the Join, e.g. "
            "model->set_join_shadow_batch(torch::zeros({0, C, H, W})) (an empty batch of the "
            "model's input shape)");
  }
}

}  // namespace ddp
