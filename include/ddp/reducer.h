// The Reducer: averages gradients across ranks during backward (paper §3.2,
// §4.2, Algorithm 1), on a list of parameters, not a module, so a custom
// training loop can use it alone:
//
//   ddp::Reducer reducer(params, names, pg);
//   for (...) {
//     auto out = model->forward(x);
//     reducer.prepare_for_backward({out});        // every iteration, after forward
//     loss(out).backward();                        // gradients are averaged when it returns
//     opt.step();
//   }
//
// Contract
// - An argument one rank gets wrong alone (names, requires_grad, options)
//   raises on that rank, and on the others an InvalidArgument naming it.
// - Construction checks that every rank passes the same parameters (count,
//   names, shapes, dtypes, in the same order); a mismatch raises
//   InvalidArgument on every rank naming the first differing parameter and
//   what each rank has there. It does not broadcast them
//   (DistributedDataParallel does).
// - Parameters are bucketed by (dtype, device) in reverse order, first bucket
//   small; each gradient is copied into its bucket slice (divided by the world
//   size) by a hook on its accumulator; buckets are all-reduced
//   asynchronously, strictly in bucket order, while backward goes on. Before
//   backward() returns every bucket is waited for and averages written back.
// - After the first synchronized iteration the buckets are rebuilt once in the
//   order gradients arrived on rank 0 (§6.2.1), unless find_unused_parameters.
//   With autotune_caps_bytes they are rebuilt in that order for each trial
//   and once more for the choice (GradBucket::layout() counts the rebuilds).
// - A parameter that gets no gradient on some rank (without
//   find_unused_parameters) makes backward() throw InvalidArgument on every
//   rank, naming it there; no half-reduced gradient is written.
// - The small status allreduce at the end of every synchronized backward also
//   carries each rank's count of forward passes (no_sync ones included),
//   whether a backward ran that no forward prepared (backward() twice), and
//   the group's tally of the collectives issued since the previous one
//   (the group keeps it: src/collectives/issued_log.h). If the ranks disagree, backward() raises on
//   every rank (InvalidArgument, or CollectiveMismatch for the collectives)
//   naming the ranks and what they did, before any gradient is written.
// - Threads: hooks and the end-of-backward callback run on the autograd
//   thread; collectives on the group's workers. Do not call prepare_for_backward
//   while a backward pass runs.
#pragma once

#include <ddp/comm_hook.h>
#include <ddp/process_group.h>
#include <ddp/statistics.h>

#include <torch/arg.h>

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ddp {

class DistributedDataParallelImpl;

struct ReducerOptions {
  // Bucket size after the first. Default 25 MiB.
  TORCH_ARG(int64_t, bucket_cap_bytes) = 25 << 20;
  // Bucket autotuning: bucket sizes to try (bytes, each with
  // bucket_cap_bytes among them; sizes that cut the same buckets are tried
  // once) from the second synchronized iteration on, in rounds of
  // successive halving (each size one iteration to settle and one measured,
  // the faster half kept) within `autotune_iterations`; each measured by the
  // slowest rank's iteration time (one small allreduce at the start of each
  // iteration while tuning). It then settles on the fastest, or on
  // bucket_cap_bytes unless another is faster by more than 2 % and by more
  // than bucket_cap_bytes's own samples vary (noise). Every rank
  // decides from the same all-reduced times, so all cut the same buckets.
  // Default empty: no tuning.
  TORCH_ARG(std::vector<int64_t>, autotune_caps_bytes);
  // The most trial iterations of autotuning, at least two per distinct
  // bucket layout of autotune_caps_bytes. Default 20.
  TORCH_ARG(int, autotune_iterations) = 20;
  // Size of the first bucket, small so that communication starts early.
  // Default 1 MiB. Not capped by bucket_cap_bytes (as in PyTorch 1.13): set
  // both for buckets of one size.
  TORCH_ARG(int64_t, first_bucket_cap_bytes) = 1 << 20;
  // A cap per bucket (bytes): the k-th bucket of each dtype and device closes
  // at the k-th, the last repeating (assign_buckets). When set it replaces
  // first_bucket_cap_bytes and bucket_cap_bytes; not with autotuning.
  // Default empty.
  TORCH_ARG(std::vector<int64_t>, bucket_caps_bytes) = {};
  // Walk the graph from the outputs each iteration; parameters not reached
  // count as ready, and globally unused ones keep their gradients untouched
  // (clear gradients between steps rather than zero them, or momentum and
  // weight decay still move those; see DistributedDataParallelOptions).
  // Default false.
  TORCH_ARG(bool, find_unused_parameters) = false;
  // With find_unused_parameters: the parameters the walk does not reach
  // (and that no no_sync pass since the last synchronized one used) are left
  // out of their buckets, whose other gradients are packed and sent alone;
  // a bucket left empty is not sent at all (PyTorch 2.8's
  // skip_all_reduce_unused_params). It requires the same unused parameters
  // on every rank: DDP_DEBUG=detail checks that in each iteration (one
  // small allreduce) and raises InvalidArgument on every rank naming the
  // first that differs; without it, ranks that differ issue different
  // collectives (an error on shm, a timeout or wrong results on gloo and
  // mpi). With a communication hook or gradient_as_bucket_view, or inside a
  // Join, they are sent as zeros as without it. Not with layer_drop_hints.
  // Default false.
  TORCH_ARG(bool, skip_all_reduce_unused_params) = false;
  // Gradients become views into the buckets: no copy back, less memory.
  // Default false.
  TORCH_ARG(bool, gradient_as_bucket_view) = false;
  // The dtype the buckets hold and the reduction runs in (PyTorch's
  // mixed-precision reduce_dtype): gradients are cast into it, and become
  // bucket slices of it after the reduction. Bucket caps still count the
  // parameters' bytes, as PyTorch's do. Default none: each bucket in its
  // parameters' dtype.
  TORCH_ARG(std::optional<at::ScalarType>, reduce_dtype) = std::nullopt;
  // Fill each bucket in one go when its last gradient is ready: one batched
  // copy of its gradients (at::_foreach_copy_) and one division of the
  // whole bucket, instead of one fused copy-and-divide per gradient as it
  // arrives (PyTorch's batched_grad_copy, 2026). On CUDA that is two kernel
  // launches per bucket (of one dtype, on libtorch 2.x) rather than one per
  // parameter; on the CPU, where a launch costs nothing, the per-gradient
  // copies overlap backward better.
  // The results are the same bit for bit. Default false.
  TORCH_ARG(bool, batched_grad_copy) = false;
  // The graph is the same every iteration: learned in the first one (which
  // parameters are used, how many times each gradient arrives), no per
  // iteration graph walk. Default false.
  TORCH_ARG(bool, static_graph) = false;
  // Launch buckets during backward as they become ready (true), or all at the
  // end of backward (false: no overlap, for measurements). Default true.
  TORCH_ARG(bool, overlap_communication) = true;
  // Place the buckets in the group's zero-copy memory when its backend has
  // some (ProcessGroup::allocate_zero_copy; the shm backend): their
  // allreduce then copies nothing in or out. Default true.
  TORCH_ARG(bool, zero_copy_buckets) = true;
  // Layer-drop hints (hint_unused): each synchronized iteration begins with
  // one small allreduce that checks every rank hinted the same parameters;
  // hinted ones are then ready at once (no graph walk, no wait) and left
  // out of their buckets, whose other gradients are packed and sent alone
  // (with a communication hook or gradient_as_bucket_view they are sent as
  // zeros instead). Not with static_graph. Default false.
  TORCH_ARG(bool, layer_drop_hints) = false;
};

class Reducer {
 public:
  // `names[i]` names params[i] in errors and logs. Parameters that do not
  // require grad are rejected (leave them out).
  Reducer(std::vector<at::Tensor> params, std::vector<std::string> names, ProcessGroupPtr group,
          ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Call after each forward whose backward should be reduced, with the
  // forward's outputs (used by find_unused_parameters and for timing).
  // With `synchronize` false (no_sync) gradients only accumulate locally,
  // and the parameters used are remembered for the next synchronized pass.
  void prepare_for_backward(const std::vector<at::Tensor>& outputs, bool synchronize = true);

  // Replaces each bucket's allreduce with `hook` (see comm_hook.h). Once,
  // before the first backward; InvalidArgument otherwise. `state`: how the
  // hook's state goes into a checkpoint and back (empty: it does not).
  void register_comm_hook(CommHook hook, HookStateIO state = {});

  bool has_comm_hook() const;

  // The registered hook's state (checkpoint.h saves it); nullopt without a
  // hook or when its state has no state_dict. Between iterations.
  std::optional<HookStateDict> hook_state() const;
  // Gives the hook's state `dict` back; nothing without a state to take it.
  void load_hook_state(const HookStateDict& dict);

  // Where the buckets stand: the parameters (their indices) in bucket
  // order, cut at cap_bytes, after `rebuilds` rebuilds (GradBucket::layout).
  // A checkpoint keeps it, so that a resumed job's hook sees the same
  // buckets under the same layout number from its first iteration on (its
  // own first iteration would otherwise use the constructed order and
  // rebuild after it).
  struct BucketLayout {
    std::vector<int64_t> order;
    int64_t cap_bytes = 0;
    int64_t rebuilds = 0;
  };
  BucketLayout bucket_layout() const;
  // Before the first synchronized iteration: the buckets become `layout`
  // and are not rebuilt from gradient order. False (nothing changed) once
  // an iteration has begun. InvalidArgument when the order is not a
  // permutation of this reducer's parameters.
  bool restore_bucket_layout(const BucketLayout& layout);

  // Layer-drop hints (layer_drop_hints): the parameters that the next
  // pass (the next prepare_for_backward; a forward without one, e.g. under
  // NoGradGuard, leaves the hint pending) and its backward leave without
  // gradient, on every rank alike (stochastic depth drawn from a shared
  // seed, a frozen branch, experts no input was routed to). A pass without
  // a call hints nothing. Under no_sync a parameter is left out of the
  // synchronized iteration only when every pass since the last one hinted
  // it; one hinted by the last pass alone is reduced with what earlier
  // passes accumulated (zeros if none). A left-out parameter keeps its
  // gradient untouched, as an unused one does. Ranks that would leave out
  // different parameters raise InvalidArgument on every rank at the
  // synchronized pass, before anything is sent; a hinted parameter that
  // gets a gradient anyway makes the synchronized backward() raise it on
  // every rank, naming it. Tensors that do not require grad are skipped.
  // InvalidArgument: another tensor that is not one of the parameters;
  // layer_drop_hints off.
  void hint_unused(const std::vector<at::Tensor>& params);

  // Join (join.h) uses these; a custom loop may too.
  // A rank out of inputs while others train: issues the collectives of one
  // synchronized backward with nothing to contribute (zeros), so the others'
  // backward completes, and writes the averages back as they do (every
  // replica holds the same gradients). Call where the others call
  // backward(), on the training thread, never during a backward pass.
  void shadow_iteration();
  // The same for a model with collectives of its own (SyncBatchNorm): after
  // a forward on an empty batch, whose backward then runs as the others'
  // does, in the same order, with zeros for every gradient it produces.
  void prepare_for_shadow_backward(const std::vector<at::Tensor>& outputs);
  // Divide gradients by `ranks` (the ranks contributing, in [1, world size])
  // from the next synchronized iteration on instead of by the world size.
  // InvalidArgument with a communication hook (it averages over the group).
  void set_divisor(int64_t ranks);
  // Ranks may run different numbers of no_sync passes before a synchronized
  // one (under Join a rank's last accumulation group can be shorter): the
  // status then compares only synchronized forward passes. Default false:
  // an extra no_sync pass on one rank is an error.
  void set_uneven_inputs(bool uneven);

  // Call after giving parameters new data of another dtype or device with
  // set_data (mixed precision does, twice an iteration): libtorch then gives
  // each a new gradient accumulator, and the Reducer's gradient hooks move
  // to them. Between a backward and the next forward; InvalidArgument
  // during the Reducer's own end-of-backward step.
  void parameters_replaced();

  // Tells the reducer how long the forward took (for statistics).
  void record_forward_time(double ms);

  // The last completed iteration's statistics.
  IterationStats stats() const;
  // Parameter indices per bucket, in launch order.
  std::vector<std::vector<size_t>> bucket_indices() const;
  const ProcessGroupPtr& process_group() const;

 private:
  // DistributedDataParallel's: what the module found wrong on this rank
  // (`module_checks`, which rethrow it) is agreed on across ranks together
  // with the Reducer's own checks, in one round (a set-up error on any rank
  // raises on every rank, naming "DistributedDataParallel").
  friend class DistributedDataParallelImpl;
  Reducer(std::vector<at::Tensor> params, std::vector<std::string> names, ProcessGroupPtr group,
          ReducerOptions options, std::function<void()> module_checks);
  // DistributedDataParallel's mixed precision: run at the end of every
  // synchronized backward (and Join's shadowed one), after the averages are
  // written, whether it succeeded or raised; returns whether it gave the
  // parameters new data (the gradient hooks then move, as with
  // parameters_replaced()).
  void at_end_of_synchronized_backward(std::function<bool()> callback);

  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp
