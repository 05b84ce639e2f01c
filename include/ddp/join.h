// Uneven inputs: ranks with different numbers of batches (the shape of
// PyTorch's torch.distributed.algorithms.Join). Without it, a rank that runs
// out of batches leaves the others blocked in their next collective until
// the timeout.
//
//   {
//     ddp::Join join({*model});              // the DDP module (and e.g. a ZeRO optimizer)
//     for (auto& batch : my_batches) {       // as many as this rank has
//       opt.zero_grad();
//       loss(model->forward(batch)).backward();
//       opt.step();
//     }
//   }  // out of batches: shadows the others' collectives until every rank is out
//
// Contract
// - Every rank constructs a Join with the same joinables, in the order their
//   collectives run within an iteration (the DDP module before an optimizer
//   that communicates), and leaves it through join() or its destructor.
// - While in a Join, each synchronized DDP forward (grad enabled, outside
//   no_sync) first runs one small allreduce that tells every rank which
//   ranks still train. A rank that joined answers it and then shadows the
//   iteration: the buffer broadcast, the gradient buckets as zeros (through
//   the communication hook, if any), the status, contributing nothing, and
//   then takes the averaged gradients as the others do. So the others'
//   gradients are the average over the ranks that had a batch.
// - A model with collectives of its own (SyncBatchNorm): the DDP module
//   needs a batch to replay (set_join_shadow_batch); a rank out of inputs
//   then runs the model's forward and backward on it, which issues the
//   model's collectives and DDP's in the order the training ranks do, with
//   zeros for everything it would contribute. Without one, a Join over a
//   model holding a SyncBatchNorm is refused at construction.
//   no_sync passes issue no collective and need no shadow. Under a Join a
//   forward with grad disabled issues no collective either (its buffers are
//   not broadcast). With a SyncBatchNorm in training mode both would (its
//   own), and no replay would match them: InvalidArgument at that forward.
// - Gradients are divided by the initial world size (default, as PyTorch),
//   or by the ranks that contributed in that iteration
//   (divide_by_initial_world_size(false); not with a communication hook,
//   which averages over the group: InvalidArgument).
// - Buffers are broadcast from the lowest rank still training (rank 0 while
//   it trains, as without a Join).
// - Once every rank has joined, each joinable finishes: DDP broadcasts the
//   parameters and buffers of the highest rank among the last to join, so
//   every replica ends with the final model. An optimizer's state (momentum)
//   on a rank that joined early missed the later steps: list the optimizer
//   as an OptimizerJoinable after the module (its state is then broadcast
//   the same way), or use a ZeroRedundancyOptimizer, listed after the
//   module: a rank out of inputs steps its shard with the averaged
//   gradients and sends it, as the others expect (with overlap_with_ddp the
//   shards step inside DDP's shadowed buckets; list it all the same, so that
//   its count of updates stays in step).
// - throw_on_early_termination(true): no shadowing; in the iteration after
//   the first rank ran out, every rank raises EarlyTermination (training
//   ranks from their forward, the rank that ran out from join()).
// - Any other collective the model issues itself runs again in that replay,
//   with what the replayed batch computes (an empty batch usually adds
//   nothing); or make it a Joinable and list it.
// - Not thread-safe; all calls on the training thread.
#pragma once

#include <ddp/process_group.h>

#include <torch/arg.h>

#include <functional>
#include <vector>

namespace torch::optim {
class Optimizer;
}

namespace ddp {

struct JoinOptions {
  // Divide gradients by the initial world size (true) or by the ranks that
  // contributed in that iteration (false). Default true (as PyTorch).
  TORCH_ARG(bool, divide_by_initial_world_size) = true;
  // Raise EarlyTermination on every rank in the iteration after the first
  // rank ran out, instead of shadowing. Default false.
  TORCH_ARG(bool, throw_on_early_termination) = false;
  // false: the Join does nothing (for code that runs with and without).
  // Default true.
  TORCH_ARG(bool, enable) = true;
};

// What the ranks said at the start of an iteration.
struct JoinIteration {
  std::vector<bool> training;  // per rank: still has inputs
  int training_ranks = 0;
  // The lowest rank still training (buffers are broadcast from it).
  int lowest_training_rank() const;
};

class Join;

// Something with collectives per iteration that a rank out of inputs must
// shadow (the DDP module; ZeroRedundancyOptimizer).
class Joinable {
 public:
  virtual ~Joinable();

  // The group its collectives run on.
  virtual ProcessGroupPtr join_process_group() const = 0;
  // This rank has joined and `iteration`'s training ranks are going on:
  // issue this joinable's collectives of one iteration, contributing nothing.
  virtual void shadow_iteration(const JoinIteration& iteration) = 0;
  // Every rank joined; `last_rank` is the highest rank among the last to
  // join: its state is the most recent.
  virtual void finish_join(int last_rank) = 0;
  // At the Join's construction: InvalidArgument if `options` do not suit
  // this joinable.
  virtual void check_join_options(const JoinOptions& options) const = 0;

 protected:
  // The Join this joinable is in, or null: a training iteration of the
  // joinable calls join()->notify(*this) first.
  Join* join() const { return join_; }

 private:
  friend class Join;
  Join* join_ = nullptr;
};

// A local optimizer (SGD, Adam, ...) as a joinable: it issues no collective,
// so a joined rank has nothing to shadow, but its state (momentum, Adam's
// moments) misses the steps the others took after it ran out. When every
// rank has joined, all ranks take the state of the last rank to finish, as
// DDP does for the parameters, so the next epoch starts in step:
//   ddp::OptimizerJoinable joinable_opt(opt);
//   ddp::Join join({*model, joinable_opt});
class OptimizerJoinable : public Joinable {
 public:
  // `group`: where to broadcast the state. Default: the default group.
  explicit OptimizerJoinable(torch::optim::Optimizer& optimizer, ProcessGroupPtr group = nullptr);

  ProcessGroupPtr join_process_group() const override { return group_; }
  void shadow_iteration(const JoinIteration&) override {}
  void finish_join(int last_rank) override;
  void check_join_options(const JoinOptions&) const override {}

 private:
  torch::optim::Optimizer& optimizer_;
  ProcessGroupPtr group_;
};

class Join {
 public:
  explicit Join(std::vector<std::reference_wrapper<Joinable>> joinables, JoinOptions options = {});
  // Joins if join() was not called, unless an exception is propagating
  // (then the other ranks fail on their own timeout or error).
  ~Join() noexcept(false);
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // This rank is out of inputs: shadows the others' iterations until every
  // rank has joined, then finishes each joinable. Idempotent.
  void join();

  // For joinables: the start of a training iteration. The first joinable's
  // call runs one allreduce (which ranks still train) and raises
  // EarlyTermination under throw_on_early_termination; the others get its
  // answer. List the DDP module first: its forward starts the iteration.
  JoinIteration notify(Joinable& joinable);

  const JoinOptions& options() const { return options_; }

 private:
  JoinIteration exchange(bool training);
  void leave();  // unregisters from the joinables

  const std::vector<std::reference_wrapper<Joinable>> joinables_;
  const JoinOptions options_;
  const ProcessGroupPtr group_;
  const int exceptions_at_start_;
  JoinIteration current_;  // the last exchange's answer
  int last_rank_ = -1;     // highest training rank of the last exchange with any
  bool joined_ = false;
};

}  // namespace ddp
