// Elastic training in process: a job that loses ranks, or gains
// them, goes on without leaving its processes.
//
//   Net net;                                   // the same model on every process
//   torch::optim::SGD opt(net->parameters(), 0.1);
//   ddp::ElasticState state(net, opt);         // module, optimizer, counters
//   ddp::ElasticSampler sampler(dataset_size, /*batch_size=*/32);
//   ddp::ElasticRunner(ddp::ElasticOptions().min_world_size(2))
//       .run(state, [&](ddp::ElasticStep& step) {
//         auto indices = sampler.indices(state.training, step.rank(), step.world_size());
//         if (indices.empty()) return sampler.next_epoch(state.training) < epochs;
//         opt.zero_grad();
//         loss_of(step.model()->forward(inputs(indices))).backward();
//         opt.step();
//         sampler.advance(state.training, step.world_size());
//         return true;
//       });
//
// How it works
// - Every process is a member with a stable id ($RANK as its launcher set
//   it; a process started later gets an unused one). Members meet on a
//   store that outlives any of them: a TCPStore hosted by `ddp-store`
//   (ddprun --elastic starts it; by hand: `ddp-store --port P`, one per
//   job, then every process with MASTER_ADDR/MASTER_PORT naming it). Only
//   processes with a $RANK propose the first generation.
// - A generation is one membership: its members in rank order, a process
//   group of them (keys under `elastic/g<N>/`, nothing of an older group is
//   read again) and a DistributedDataParallel over the state's module.
// - A collective that fails (a rank died: at once; a rank stopped: at the
//   group's timeout) throws out of the step on the survivors. Each restores
//   its last commit and opens generation N+1. A member counts as gone once
//   its process is dead (same host: its pid; elsewhere: its heartbeat on the
//   store is older than `dead_after`); the generation is decided when every
//   member of N has arrived or is gone, with at least `min_world_size`.
// - A process that starts later (or was left out) registers for the next
//   generation; the members see it at their next step boundary (every step
//   ends with an allreduce of two integers: whether a change is wanted,
//   whether the step function is done) and re-form with it. Past
//   max_world_size it waits as a spare, without a deadline, until a place
//   opens or the job ends.
// - After each formation the state is synchronized: the member with the
//   most steps committed (the lowest rank among equals) broadcasts its
//   commit, serialized as a checkpoint is (checkpoint.h), and every other
//   member loads it. The result is bit-identical to saving a checkpoint at
//   that step and loading it into the new world.
// - Every step boundary is committed: the TrainingState and the buffers are
//   copied, and what an optimizer step would move is noted (the version
//   counters of the parameters and of the optimizer's state). A step that throws
//   before its optimizer step is undone from there (parameters and
//   optimizer state untouched), so no completed step is lost; every
//   `commit_every` steps a full copy covers a step that throws after it.
//
// Errors: fewer than `min_world_size` members left at the end of
// `reform_timeout` is a TimeoutError on every survivor naming who is left
// and who is gone (an on-disk checkpoint is not touched); a store that
// cannot be reached names its address. An exception from the step that is
// not a communication failure (anything but CommunicationError, which
// TimeoutError is) ends run() as it would a plain loop.
#pragma once

#include <ddp/checkpoint.h>
#include <ddp/distributed_data_parallel.h>
#include <ddp/init.h>

#include <torch/arg.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace ddp {
class ZeroRedundancyOptimizer;
namespace detail::elastic {
class Membership;
}

struct ElasticOptions {
  // Fewest members the job goes on with. Default 1;
  // $DDP_ELASTIC_MIN_WORLD_SIZE overrides it (ddprun --elastic MIN:MAX).
  TORCH_ARG(int, min_world_size) = 1;
  // Most members; later arrivals wait for a place as spares. Default 0: no
  // limit;
  // $DDP_ELASTIC_MAX_WORLD_SIZE overrides it.
  TORCH_ARG(int, max_world_size) = 0;
  // The members of the first generation: it is formed when that many
  // arrived. Default -1: $WORLD_SIZE.
  TORCH_ARG(int, initial_world_size) = -1;
  // Backend, collective timeout and the rest of each generation's group
  // (rank, world size and init_method are the runner's). Default: as
  // init_process_group's, $DDP_BACKEND and $DDP_TIMEOUT included.
  TORCH_ARG(InitOptions, init) = {};
  // Each generation's DistributedDataParallel (process_group is the
  // runner's). Default: DDP's defaults.
  TORCH_ARG(DistributedDataParallelOptions, ddp) = {};
  // A full copy of the state after every this many steps (and at each
  // formation). A step that fails before its optimizer step (in forward or
  // backward, where DDP's collectives are) goes back to the last step
  // boundary at no copy's cost; one that fails after it (a collective of
  // its own after opt.step()) goes back to the last full copy, losing at
  // most commit_every - 1 steps. Default 100.
  TORCH_ARG(int, commit_every) = 100;
  // How often a member shows on the store that it lives. Default 100 ms.
  TORCH_ARG(std::chrono::milliseconds, heartbeat_interval) = std::chrono::milliseconds(100);
  // A member on another host whose heartbeat has not moved for this long is
  // gone (on this host its process is checked directly). Default 3 s.
  TORCH_ARG(std::chrono::milliseconds, dead_after) = std::chrono::seconds(3);
  // How long a formation waits for members and for min_world_size.
  // Default 5 minutes; $DDP_RENDEZVOUS_TIMEOUT_S overrides it.
  TORCH_ARG(std::chrono::milliseconds, reform_timeout) = std::chrono::minutes(5);
};

// One generation's membership, as the step and the callbacks see it.
struct ElasticWorld {
  int64_t generation = -1;  // 0, 1, ...; -1: none yet
  int rank = -1;
  int world_size = 0;
  std::vector<int> members;  // member ids in rank order
  std::vector<int> left;     // ids of the previous generation not in this one
  std::vector<int> joined;   // ids new in this one
  double formed_s = 0;       // from the first arrival to the decision
};

// What survives a change of membership: the module's parameters and
// buffers, the optimizer's state and the TrainingState (epoch, steps,
// samples consumed by all ranks in the epoch, extra tensors). The module is
// wrapped in a new DistributedDataParallel each generation.
class ElasticState {
 public:
  // `module`: a ModuleHolder (a TORCH_MODULE) or a std::shared_ptr to a
  // module with a forward(), as DistributedDataParallel takes it.
  // `optimizer` must outlive the state: libtorch's SGD, Adam, AdamW,
  // Adagrad or RMSprop (a commit refuses another's state, naming its type:
  // it could not be copied), or a ZeroRedundancyOptimizer wrapping one,
  // made with ZeroOptions().elastic(true) (another ZeRO is refused here).
  // ZeRO's shards are re-partitioned over each generation: each member
  // keeps its shard and a replica of the next member's, so the state of a
  // lost member lives on; when a member and the one before it are lost
  // together (a shard and its replica), every survivor raises ddp::Error
  // naming the parameter whose state is gone, and the job ends (restart
  // from an on-disk checkpoint).
  template <typename ModuleType>
  ElasticState(ModuleType module, torch::optim::Optimizer& optimizer)
      : ElasticState(module_pointer(module), optimizer,
                     [module](DistributedDataParallelOptions options) {
                       return DistributedDataParallel(module, std::move(options));
                     }) {}
  ~ElasticState();

  TrainingState training;

  // Records a step boundary (the runner does after each step): the
  // TrainingState, the module's buffers, the optimizer's options and the
  // parameters' version counters; with `full`, a copy of the parameters and
  // the optimizer's state too (the runner: every commit_every-th boundary
  // and at each formation). Only the full copy costs memory bandwidth in
  // proportion to the model. An optimizer without state (SGD without
  // momentum) shows no trace of a step: then every commit is full. After
  // loading a checkpoint inside a step, commit(true) there, so that a later
  // failure does not go back past the load. With a ZeroRedundancyOptimizer
  // the copies hold this member's shard and its replica of the next one's.
  void commit(bool full = true);
  // Back to the last boundary when the optimizer has not stepped since (a
  // step that failed in its forward or backward: parameters and optimizer
  // state are still the boundary's), else to the last full copy.
  void restore();
  // training.iteration of the state the last commit or restore left; -1
  // before the first commit.
  int64_t committed_iteration() const;

 private:
  using ModelFactory = std::function<DistributedDataParallel(DistributedDataParallelOptions)>;
  ElasticState(std::shared_ptr<torch::nn::Module> module, torch::optim::Optimizer& optimizer,
               ModelFactory make_model);
  friend class ElasticRunner;
  // The runner's, collective over a new generation's group: every member
  // ends with the same state. Of the member furthest ahead, sent as
  // checkpoint bytes (checkpoint.h, without RNG states); with ZeRO, of the
  // last step whose optimizer state the members hold in full, the module
  // and counters from one member and each shard from a member that keeps
  // it, re-partitioned over the group (zero_shards.cpp).
  void synchronize(const ProcessGroupPtr& group, const std::string& where);
  void synchronize_zero(const ProcessGroupPtr& group, const std::string& where);
  // The module and counters (and the optimizer's state but with ZeRO) as
  // checkpoint bytes, and their load.
  std::string serialize() const;
  void load(const std::string& bytes, const ProcessGroup& group);
  // Back to the last full copy; its step, -1: none. Which parameters'
  // optimizer state this process keeps, now (false) or in the full copy
  // (true): all of them but with ZeRO.
  void restore_full();
  int64_t full_copy_iteration() const;
  std::vector<bool> kept_states(bool in_full_copy) const;
  // The runner's, once every member has passed a step boundary (its
  // allreduce completed): the full copy when due (taken only now, so that
  // no member's copy is ahead of a member that failed at the boundary), and
  // the last handover's states dropped.
  void passed_boundary(bool full);

  // With ZeRO: the optimizer states this process held at the step of its
  // last handover, kept until the generation's first boundary has passed,
  // so that a failure during a handover loses no state (zero_shards.cpp).
  struct ZeroHandover;
  DistributedDataParallel make_model(DistributedDataParallelOptions options) const {
    return make_model_(std::move(options));
  }
  template <typename M>
  static std::shared_ptr<torch::nn::Module> module_pointer(const M& m) {
    if constexpr (std::is_convertible_v<M, std::shared_ptr<torch::nn::Module>>) {
      return m;
    } else {
      return m.ptr();  // a ModuleHolder
    }
  }

  struct Snapshot;
  std::shared_ptr<torch::nn::Module> module_;
  torch::optim::Optimizer& optimizer_;
  ZeroRedundancyOptimizer* zero_ = nullptr;  // optimizer_, when it is one
  ModelFactory make_model_;
  std::unique_ptr<Snapshot> snapshot_;
  std::unique_ptr<ZeroHandover> zero_handover_;
};

// What the step function is given: this generation's world and model.
class ElasticStep {
 public:
  ElasticStep(const ElasticWorld& world, ProcessGroupPtr group, DistributedDataParallel& model)
      : world_(world), group_(std::move(group)), model_(model) {}
  int rank() const { return world_.rank; }
  int world_size() const { return world_.world_size; }
  const ElasticWorld& world() const { return world_; }
  // This generation's group, for the step's own collectives.
  const ProcessGroupPtr& group() const { return group_; }
  DistributedDataParallel& model() const { return model_; }

 private:
  const ElasticWorld& world_;
  ProcessGroupPtr group_;
  DistributedDataParallel& model_;
};

class ElasticRunner {
 public:
  explicit ElasticRunner(ElasticOptions options = {});
  ~ElasticRunner();

  // Called on every member after each formation, the state synchronized,
  // before the first step of the generation: rescale the learning rate or
  // the batch to the new world here. `previous` is this process's last
  // generation (generation -1 the first time).
  ElasticRunner& on_world_change(
      std::function<void(const ElasticWorld& previous, const ElasticWorld& now)> callback);

  // Forms the first generation (or joins a running job), then calls `step`
  // until it returns false on every member (returning false on some members
  // only is an InvalidArgument on all), re-forming on failures and joins.
  // Returns the last generation; one of generation -1 (rank -1) when the
  // job finished while this process waited to join (a member left out
  // after a stop, a spare).
  ElasticWorld run(ElasticState& state, const std::function<bool(ElasticStep&)>& step);

 private:
  // One generation: its group, the state synchronized, its DDP, its steps.
  // True when the job is done; false when a process waits to join.
  bool run_generation(ElasticState& state, const std::function<bool(ElasticStep&)>& step,
                      detail::elastic::Membership& membership, const ElasticWorld& previous,
                      const ElasticWorld& world);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The order of each epoch's samples, consumed as global batches of
// world_size * batch_size: the position (TrainingState::epoch_samples,
// counted over all ranks) carries over a change of world size, so no sample
// of the epoch is skipped or seen twice. An epoch ends when fewer samples
// than ranks are left (those few are not used).
class ElasticSampler {
 public:
  // shuffle: a permutation seeded by `seed` and the epoch, the same on every
  // member; else 0, 1, 2, ...
  ElasticSampler(int64_t dataset_size, int64_t batch_size, bool shuffle = true, uint64_t seed = 0);

  // This rank's indices of the step at `state`: its share of the next
  // global batch (the last batch of an epoch is split as evenly as it goes);
  // empty once the epoch is consumed.
  std::vector<int64_t> indices(const TrainingState& state, int rank, int world_size);
  // Moves `state` past the step's global batch (iteration and epoch_samples).
  void advance(TrainingState& state, int world_size) const;
  // Starts the next epoch; returns its number.
  int64_t next_epoch(TrainingState& state) const;

 private:
  const int64_t size_, batch_;
  const bool shuffle_;
  const uint64_t seed_;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace ddp
