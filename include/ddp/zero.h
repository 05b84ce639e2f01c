// ZeroRedundancyOptimizer (ZeRO stage 1): optimizer state sharded across
// ranks. Each parameter belongs to one rank, which alone keeps its state
// (Adam's moments, SGD's momentum) and updates it; the others receive it.
//
//   ddp::DistributedDataParallel model(net);
//   ddp::ZeroRedundancyOptimizer opt(model->parameters(), torch::optim::AdamOptions(1e-3));
//   ... loss.backward(); opt.step(); opt.zero_grad();
//
// Contract
// - Construction is collective. Parameters (all groups, in order) are split
//   by size, greedily largest first, each to the rank holding the fewest
//   elements so far: every rank computes the same split. A small allgather
//   compares the wrapped optimizer and every parameter's group, dtype and
//   shape across ranks; a difference is an InvalidArgument on every rank
//   naming the rank and the parameter (#i, counted over all groups).
// - step() is collective: this rank's optimizer steps its shard (with the
//   options of param_groups(), so learning-rate changes apply), then each
//   owner broadcasts its updated parameters, coalesced into buckets of at
//   most bucket_cap_mb per owner and dtype. Afterwards every rank holds the
//   same parameters as the unsharded optimizer would produce.
// - Gradients must already be the same on every rank (DDP's backward makes
//   them so): only the owner's gradient is used.
// - consolidate_state_dict(to_rank) is collective: it gathers every shard's
//   state on `to_rank`, whose save() (torch::save) then writes a checkpoint
//   independent of the split. load() (torch::load) on every rank keeps its
//   own shard, at any world size, for the same parameters and groups.
// - overlap_with_ddp: register the hook on the DDP module,
//     model->register_comm_hook(&opt, ddp::zero_hook);
//   it averages each bucket, then (on DDP's communication thread, while
//   backward goes on) steps this rank's parameters of that bucket and
//   broadcasts them from their owners, from the first iteration on (the
//   split is by parameter, so DDP's rebuilt buckets change nothing). Every
//   parameter must get a gradient each iteration (no find_unused_parameters),
//   gradients cannot be changed between backward and step() (clipping), and
//   step() takes no closure.
// - Join (uneven inputs): list the optimizer after the DDP module, e.g.
//   ddp::Join join({*model, opt}); a rank out of inputs then steps its shard
//   in every iteration the others still train (with the averaged gradients
//   DDP's shadow gives it) and sends the updated parameters.
// - Wrapped types: torch::optim::SGD, Adam, AdamW, Adagrad, RMSprop through
//   their options (ZeroOptimizerTraits); any other through a Wrapped.
// - Elastic training (ZeroOptions::elastic, elastic.h): construction is
//   local and the ElasticRunner shards the optimizer over each generation's
//   group. Each rank then also keeps a replica of the next rank's shard
//   (rank r of W: rank (r + 1) % W's), stepped beside its own from the same
//   averaged gradients (the same on every rank, as above), so that the
//   state of any one lost rank lives on: twice the shard's state memory and
//   optimizer compute, no communication.
//   Before the runner shards it, step(), owner() and the checkpoint calls
//   raise InvalidArgument.
#pragma once

#include <ddp/comm_hook.h>
#include <ddp/join.h>
#include <ddp/process_group.h>

#include <torch/arg.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ddp {

struct ZeroOptions {
  // The group to shard over. Default: ddp::default_process_group().
  TORCH_ARG(ProcessGroupPtr, process_group) = nullptr;
  // Largest broadcast of updated parameters, in MiB (a larger parameter goes
  // alone). Default 25.
  TORCH_ARG(double, bucket_cap_mb) = 25;
  // Update each DDP bucket's parameters as soon as the bucket is reduced,
  // during backward, through zero_hook (register it on the DDP module);
  // step() then only checks that every parameter was updated. Default false.
  TORCH_ARG(bool, overlap_with_ddp) = false;
  // Sharded by ddp::ElasticRunner (elastic.h) at each generation, with a
  // replica of the next rank's shard (see above); process_group must be
  // unset. Default false.
  TORCH_ARG(bool, elastic) = false;
};

// How ZeRO makes and inspects the optimizer it wraps.
struct ZeroWrapped {
  std::string name;  // compared across ranks, e.g. "Adam"
  std::function<std::unique_ptr<torch::optim::Optimizer>(
      std::vector<torch::optim::OptimizerParamGroup>)>
      make;
  std::function<std::unique_ptr<torch::optim::OptimizerParamState>()> make_state;
  std::function<std::unique_ptr<torch::optim::OptimizerOptions>()> make_options;
  // The tensors of one parameter's state (for memory accounting).
  std::function<std::vector<torch::Tensor>(const torch::optim::OptimizerParamState&)> state_tensors;
};

template <typename Options>
struct ZeroOptimizerTraits;  // specialized below for libtorch's optimizers

#define DDP_ZERO_TRAITS(NAME, ...)                                                           \
  template <>                                                                                \
  struct ZeroOptimizerTraits<torch::optim::NAME##Options> {                                  \
    using Optimizer = torch::optim::NAME;                                                    \
    using ParamState = torch::optim::NAME##ParamState;                                       \
    static const char* name() { return #NAME; }                                              \
    static std::vector<torch::Tensor> tensors(const ParamState& s) { return {__VA_ARGS__}; } \
  };
DDP_ZERO_TRAITS(SGD, s.momentum_buffer())
DDP_ZERO_TRAITS(Adam, s.exp_avg(), s.exp_avg_sq(), s.max_exp_avg_sq())
DDP_ZERO_TRAITS(AdamW, s.exp_avg(), s.exp_avg_sq(), s.max_exp_avg_sq())
DDP_ZERO_TRAITS(Adagrad, s.sum())
DDP_ZERO_TRAITS(RMSprop, s.square_avg(), s.momentum_buffer(), s.grad_avg())
#undef DDP_ZERO_TRAITS

template <typename Options>
ZeroWrapped zero_wrapped(const Options& defaults) {
  using Traits = ZeroOptimizerTraits<Options>;
  ZeroWrapped w;
  w.name = Traits::name();
  w.make = [defaults](std::vector<torch::optim::OptimizerParamGroup> groups) {
    return std::make_unique<typename Traits::Optimizer>(std::move(groups), defaults);
  };
  w.make_state = [] { return std::make_unique<typename Traits::ParamState>(); };
  w.make_options = [defaults] { return std::make_unique<Options>(defaults); };  // then read
  w.state_tensors = [](const torch::optim::OptimizerParamState& s) {
    return Traits::tensors(static_cast<const typename Traits::ParamState&>(s));
  };
  return w;
}

class ZeroRedundancyOptimizer;
namespace detail {
struct ZeroAccess;  // elastic training's view of the shards (src/zero/zero_impl.h)
}

// The communication hook of ZeroOptions::overlap_with_ddp (see above).
FuturePtr zero_hook(ZeroRedundancyOptimizer* optimizer, GradBucket& bucket);

class ZeroRedundancyOptimizer : public torch::optim::Optimizer, public Joinable {
 public:
  // `defaults`: the wrapped optimizer's options, e.g. torch::optim::AdamOptions(1e-3).
  template <typename Options>
  ZeroRedundancyOptimizer(std::vector<torch::Tensor> params, const Options& defaults,
                          ZeroOptions options = {})
      : ZeroRedundancyOptimizer({torch::optim::OptimizerParamGroup(std::move(params))}, defaults,
                                zero_wrapped(defaults), std::move(options)) {}
  template <typename Options>
  ZeroRedundancyOptimizer(std::vector<torch::optim::OptimizerParamGroup> groups,
                          const Options& defaults, ZeroOptions options = {})
      : ZeroRedundancyOptimizer(std::move(groups), defaults, zero_wrapped(defaults),
                                std::move(options)) {}
  ZeroRedundancyOptimizer(std::vector<torch::optim::OptimizerParamGroup> groups,
                          const torch::optim::OptimizerOptions& defaults, ZeroWrapped wrapped,
                          ZeroOptions options);
  ~ZeroRedundancyOptimizer() override;

  torch::Tensor step(LossClosure closure = nullptr) override;

  // Collective: gathers every rank's shard of the state on `to_rank`.
  void consolidate_state_dict(int to_rank = 0);
  // The consolidated checkpoint; only on the rank that consolidated, after
  // the last step (InvalidArgument otherwise).
  void save(torch::serialize::OutputArchive& archive) const override;
  // Every rank, with the same checkpoint: param groups' options and this
  // rank's shard of the state.
  void load(torch::serialize::InputArchive& archive) override;

  // The rank owning parameter #i (over all groups, in order).
  int owner(size_t index) const;
  // This rank's optimizer (its shard's parameters only).
  torch::optim::Optimizer& local_optimizer();
  // Bytes of optimizer state this rank holds (its replica of the next shard included).
  int64_t state_bytes() const;

  // Joinable (join.h): list it after the DDP module, ddp::Join join({*model, opt}).
  // A rank out of inputs steps its shard with the averaged gradients DDP's
  // shadow left it and sends it, as the others expect from its owner.
  ProcessGroupPtr join_process_group() const override;
  void shadow_iteration(const JoinIteration& iteration) override;
  void finish_join(int) override {}  // every shard stepped in every iteration
  void check_join_options(const JoinOptions&) const override {}

 private:
  friend FuturePtr zero_hook(ZeroRedundancyOptimizer* optimizer, GradBucket& bucket);
  friend struct detail::ZeroAccess;
  void sync_options();
  torch::Tensor step_shard(LossClosure closure);
  void step_reduced_bucket(GradBucket& bucket);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp
