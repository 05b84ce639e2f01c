// DistributedDataParallel (paper §3.1, §4.1): wraps any torch::nn::Module so
// that its gradients are averaged across ranks during backward. A local
// training loop changes by one line:
//
//   auto net = MyNet();
//   ddp::DistributedDataParallel model(net);            // was: auto model = net;
//   torch::optim::SGD opt(model->parameters(), 0.01);
//   auto loss = torch::nll_loss(model->forward(x), y);  // forward: any arguments
//   loss.backward();                                     // gradients averaged here
//   opt.step();
//
// Contract
// - Construction is collective: every rank must construct it with the same
//   model. It checks parameter count, shapes and dtypes across ranks (an
//   error on every rank otherwise), then broadcasts rank 0's parameters and
//   buffers (init_sync).
// - parameters() are the wrapped module's own tensors, in its order;
//   named_parameters() prefixes "module." as PyTorch's DDP does; module()
//   returns the wrapped module itself.
// - forward(args...) runs the wrapped module's forward (through AnyModule:
//   any argument types; ReturnType is torch::Tensor unless given, e.g.
//   forward<std::tuple<Tensor, Tensor>>(x)). With grad enabled and outside
//   no_sync it prepares the Reducer for the coming backward. The arguments'
//   types must be exactly those of the module's forward, checked at run time
//   by AnyModule: a literal 0 for an int64_t compiles, then throws "Expected
//   argument #1 to be of type long, but received value of type int"; pass
//   int64_t{0}.
// - Buffers are broadcast from rank 0 before every forward outside no_sync
//   (broadcast_buffers).
// - Not thread-safe: one training thread per instance.
#pragma once

#include <ddp/bucket_cap.h>
#include <ddp/comm_hook.h>
#include <ddp/join.h>
#include <ddp/process_group.h>
#include <ddp/reducer.h>
#include <ddp/statistics.h>

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace ddp {

// Mixed precision inside DDP (PyTorch's _MixedPrecision, 2.0): parameters
// keep their dtype outside forward and backward (the optimizer steps them,
// checkpoints save them), compute in another, and gradients are reduced in
// a third. Only floating-point tensors are cast. Not a communication hook:
// it composes with hooks and with gradient_as_bucket_view.
//   DistributedDataParallelOptions().mixed_precision(
//       ddp::MixedPrecision{torch::kBFloat16, torch::kFloat32, torch::kBFloat16})
struct MixedPrecision {
  // The forward and backward compute in it: before each forward the
  // parameters become copies in it, and floating-point tensor arguments of
  // forward() are cast to it; at the end of the backward they get their own
  // data back, with their gradients cast to their dtype. Default none: the
  // parameters' own.
  std::optional<at::ScalarType> param_dtype;
  // Gradients are reduced in it (the buckets hold it). Default none:
  // param_dtype, else the parameters' own.
  std::optional<at::ScalarType> reduce_dtype;
  // The module's floating-point buffers are cast to it once, at
  // construction. Default none: they keep theirs.
  std::optional<at::ScalarType> buffer_dtype;
};

struct DistributedDataParallelOptions {
  // The group to reduce over. Default: ddp::default_process_group().
  TORCH_ARG(ProcessGroupPtr, process_group) = nullptr;
  // Bucket size in MiB (paper §5.3), or "auto": the first iterations try
  // sizes from 1 to 100 MiB (at most 20 trial iterations), measured by the
  // slowest rank's iteration time, and settle on the fastest, keeping 25
  // unless another is faster by over 2 % and beyond the noise of 25's own
  // samples (IterationStats::bucket_tuning shows the trials and the
  // choice). 0 reduces every parameter after the first bucket on its own
  // (that one keeps first_bucket_cap_mb). Default
  // $DDP_BUCKET_CAP_MB when set (MiB or "auto"), else 25.
  TORCH_ARG(BucketCapMb, bucket_cap_mb);
  // Size of the first bucket in MiB, small so that communication starts
  // early in backward. Default 1. Not capped by bucket_cap_mb: a smaller
  // bucket_cap_mb still gives a first bucket of about 1 MiB, as in PyTorch
  // 1.13 (PyTorch 2.6 uses bucket_cap_mb for the first bucket too when
  // bucket_cap_mb is given). Set both for buckets of one size.
  TORCH_ARG(double, first_bucket_cap_mb) = 1;
  // A cap per bucket in MiB (PyTorch's bucket_cap_mb_list, 2.13): the k-th
  // bucket (in backward order, per dtype and device) closes at the k-th,
  // the last repeating; {1, 25} is the default pair above. When set it
  // replaces bucket_cap_mb and first_bucket_cap_mb; not with
  // bucket_cap_mb("auto"). Default empty.
  TORCH_ARG(std::vector<double>, bucket_cap_mb_list) = {};
  // Broadcast rank 0's buffers (e.g. BatchNorm statistics) before each
  // forward. Default true.
  TORCH_ARG(bool, broadcast_buffers) = true;
  // Tolerate parameters that get no gradient in some iterations (walks the
  // graph after each forward). Default false. A parameter no rank used keeps
  // its gradient as it was, so clear gradients rather than zero them:
  // libtorch 1.13's Optimizer::zero_grad() fills zeros (2.x clears), and
  // SGD's momentum and weight decay still move a parameter whose gradient is
  // zero. model->zero_grad(/*set_to_none=*/true) clears on both versions.
  TORCH_ARG(bool, find_unused_parameters) = false;
  // With find_unused_parameters: parameters the forward did not use are not
  // sent; a bucket of them alone is not reduced at all (PyTorch 2.8's
  // skip_all_reduce_unused_params). Every rank must leave the same ones
  // unused: DDP_DEBUG=detail checks it; otherwise ranks that differ issue
  // different collectives (ReducerOptions::skip_all_reduce_unused_params).
  // Default false.
  TORCH_ARG(bool, skip_all_reduce_unused_params) = false;
  // Gradients become views into the communication buckets (no copy, less
  // memory). Default false.
  TORCH_ARG(bool, gradient_as_bucket_view) = false;
  // Compute, reduce and buffers in other dtypes (MixedPrecision above).
  // Default none: everything in the parameters' dtypes.
  TORCH_ARG(std::optional<MixedPrecision>, mixed_precision) = std::nullopt;
  // Each bucket filled by one batched copy and one division when its last
  // gradient is ready (PyTorch's batched_grad_copy; ReducerOptions). Default
  // false.
  TORCH_ARG(bool, batched_grad_copy) = false;
  // The set of used parameters and their gradient counts never change:
  // learned once, no graph walk; handles gradients arriving twice (shared
  // weights with reentrant checkpointing). Default false.
  TORCH_ARG(bool, static_graph) = false;
  // Parameters left out of synchronization, by name as in the wrapped
  // module's named_parameters() (e.g. {"embedding.weight"}). Default none.
  TORCH_ARG(std::vector<std::string>, parameters_to_ignore) = {};
  // Check and broadcast parameters and buffers at construction (PyTorch's
  // init_sync, 2.6). false: for ranks already made identical (a checkpoint
  // loaded on each, an elastic handover); only the parameters' names,
  // shapes and dtypes are still checked, and with DDP_DEBUG=detail every
  // value too (verify_same_model). Separate from broadcast_buffers, which
  // is about each forward. Default true.
  TORCH_ARG(bool, init_sync) = true;
  // Overlap communication with backward (false: reduce all buckets after
  // backward, for measurements). Default true.
  TORCH_ARG(bool, overlap_communication) = true;
  // Keep the buckets in memory the group reduces in place (the shm backend,
  // and so the default on one host: a region every rank maps), saving the
  // copy of each bucket in and out of shared memory. Default true; false for
  // the copying path (measurements).
  TORCH_ARG(bool, zero_copy_buckets) = true;
  // Allow hint_unused_parameters (layer dropping): every synchronized
  // iteration then begins with one small allreduce that checks the ranks'
  // hints agree. Not with static_graph. Default false.
  TORCH_ARG(bool, layer_drop_hints) = false;
};

class DistributedDataParallelImpl;
class ZeroRedundancyOptimizer;
namespace detail {
class LowPrecisionParams;
class ModuleTimeline;
}

// Scope in which gradients accumulate locally (paper §3.2.4): the first
// backward after a forward outside it reduces everything accumulated.
class NoSyncGuard {
 public:
  explicit NoSyncGuard(DistributedDataParallelImpl& ddp);
  ~NoSyncGuard();
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;

 private:
  DistributedDataParallelImpl& ddp_;
  bool previous_;
};

class DistributedDataParallelImpl : public torch::nn::Module, public Joinable {
 public:
  // `module`: a ModuleHolder (e.g. torch::nn::Linear, torch::nn::Sequential,
  // a TORCH_MODULE) or a std::shared_ptr to a module with a forward() method.
  template <typename ModuleType>
  explicit DistributedDataParallelImpl(ModuleType module,
                                       DistributedDataParallelOptions options = {}) {
    if constexpr (is_sequential<ModuleType>::value) {
      sequential_ = torch::nn::Sequential(module);  // forward() is a template: no AnyModule
      wrapped_ = sequential_.ptr();
    } else {
      any_ = torch::nn::AnyModule(std::move(module));
      wrapped_ = any_.ptr();
    }
    initialize(std::move(options));
  }

  template <typename ReturnType = torch::Tensor, typename... Args>
  ReturnType forward(Args&&... args) {
    const auto start = before_forward();
    struct OnThrow {  // mixed_precision: the parameters given back
      DistributedDataParallelImpl* ddp;
      ~OnThrow() {
        if (ddp) ddp->restore_unless_awaiting_backward();
      }
    } on_throw{this};
    ReturnType out = forward_wrapped<ReturnType>(cast_input(std::forward<Args>(args))...);
    after_forward(tensors_of(out), start);
    on_throw.ddp = nullptr;
    return out;
  }
  ~DistributedDataParallelImpl() override;

  // Join (join.h) with a model that issues collectives of its own
  // (SyncBatchNorm): the arguments of a forward that a rank out of inputs
  // replays in each iteration it shadows, followed by a backward from every
  // output, so that it issues the model's collectives in the same order as
  // the ranks that train. What the replay computes is contributed nowhere
  // (DDP and SyncBatchNorm send zeros for it), so any valid batch will do;
  // an empty one costs least:
  //   model->set_join_shadow_batch(torch::zeros({0, 3, 32, 32}));
  // ReturnType as for forward(). Without it, a Join over a model that holds
  // a SyncBatchNorm is refused (InvalidArgument) unless it throws on early
  // termination.
  template <typename ReturnType = torch::Tensor, typename... Args>
  void set_join_shadow_batch(Args... args) {
    join_shadow_forward_ = [this, args...] {
      return tensors_of(forward_wrapped<ReturnType>(args...));
    };
  }

  // The wrapped module.
  std::shared_ptr<torch::nn::Module> module() const { return wrapped_; }
  template <typename ModuleType>
  std::shared_ptr<ModuleType> module_as() const {
    return std::dynamic_pointer_cast<ModuleType>(wrapped_);
  }

  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }
  template <typename F>
  auto no_sync(F&& f) {
    NoSyncGuard guard(*this);
    return f();
  }

  // Replaces the allreduce of each bucket with `hook(state, bucket)` (see
  // comm_hook.h and hooks/*.h). Once, before the first backward. Returns the
  // state, kept by the module, for inspection (e.g. PowerSGD statistics).
  //   model->register_comm_hook(pg, ddp::fp16_compress_hook);
  template <typename State, typename Hook>
  std::shared_ptr<State> register_comm_hook(State state, Hook hook) {
    if constexpr (std::is_same_v<State, ZeroRedundancyOptimizer*>) refuse_zero_overlap();
    auto shared = std::make_shared<State>(std::move(state));
    HookStateIO io;
    if constexpr (detail::HasStateDict<State>::value) {  // checkpoints carry it
      io.save = [shared] { return shared->state_dict(); };
      io.load = [shared](const HookStateDict& dict) { shared->load_state_dict(dict); };
    }
    reducer_->register_comm_hook(
        [shared, hook](GradBucket& bucket) { return hook(*shared, bucket); }, std::move(io));
    return shared;
  }

  // Layer-drop hints (layer_drop_hints): the parameters the next forward
  // leaves without gradient on every rank, e.g. the blocks stochastic depth
  // skips with a seed all ranks share:
  //   model->hint_unused_parameters(block->parameters());
  //   auto out = model->forward(x);  // skips that block
  // They are neither walked to, waited for nor sent; they keep their
  // gradients untouched, as unused parameters do. Hints that differ across
  // ranks, or a hinted parameter that gets a gradient, raise InvalidArgument
  // on every rank. See Reducer::hint_unused.
  void hint_unused_parameters(const std::vector<torch::Tensor>& params) {
    reducer_->hint_unused(params);
  }

  // The last synchronized iteration's statistics.
  IterationStats stats() const;

  // Joinable (join.h): ddp::Join join({*model}).
  ProcessGroupPtr join_process_group() const override { return group_; }
  void shadow_iteration(const JoinIteration& iteration) override;
  void finish_join(int last_rank) override;
  void check_join_options(const JoinOptions& options) const override;
  Reducer& reducer() { return *reducer_; }
  const Reducer& reducer() const { return *reducer_; }
  const DistributedDataParallelOptions& options() const { return options_; }

 private:
  friend class NoSyncGuard;
  void initialize(DistributedDataParallelOptions options);
  // The wrapped module's parameters that DDP synchronizes, and their names.
  void synchronized_parameters(std::vector<torch::Tensor>& params,
                               std::vector<std::string>& names) const;
  template <typename ReturnType, typename... Args>
  ReturnType forward_wrapped(Args&&... args) {
    return sequential_ ? sequential_->forward<ReturnType>(std::forward<Args>(args)...)
                       : any_.forward<ReturnType>(std::forward<Args>(args)...);
  }
  // Join: this rank's replay of set_join_shadow_batch's forward and backward.
  void replay_join_shadow_batch();
  // Join: InvalidArgument when this forward (no_sync, or grad disabled) would
  // issue model collectives that no replay matches.
  void check_forward_can_be_shadowed() const;
  std::chrono::steady_clock::time_point before_forward();
  // mixed_precision: a floating-point tensor argument in param_dtype; any
  // other argument as it is.
  template <typename T>
  decltype(auto) cast_input(T&& arg) const {
    if constexpr (std::is_same_v<std::decay_t<T>, torch::Tensor>) {
      return torch::Tensor(cast_tensor_input(arg));
    } else {
      return std::forward<T>(arg);
    }
  }
  torch::Tensor cast_tensor_input(const torch::Tensor& t) const;
  void set_up_mixed_precision();
  // zero_hook steps the parameters during backward: not with mixed_precision,
  // which holds them in param_dtype then (InvalidArgument).
  void refuse_zero_overlap() const;
  void lower_parameters();
  bool restore_parameters();  // whether they got their own data back
  void restore_parameters_after(const std::vector<torch::Tensor>& outputs);
  void restore_unless_awaiting_backward();
  std::set<std::string> ignored_parameter_names() const;
  void after_forward(const std::vector<torch::Tensor>& outputs,
                     std::chrono::steady_clock::time_point start);

  // The tensors in a forward's result, for the graph walk.
  static std::vector<torch::Tensor> tensors_of(const torch::Tensor& t) { return {t}; }
  static std::vector<torch::Tensor> tensors_of(const std::vector<torch::Tensor>& v) { return v; }
  template <typename... Ts>
  static std::vector<torch::Tensor> tensors_of(const std::tuple<Ts...>& t) {
    std::vector<torch::Tensor> out;
    std::apply([&](const auto&... e) { (append(out, tensors_of(e)), ...); }, t);
    return out;
  }
  template <typename T>
  static std::vector<torch::Tensor> tensors_of(const T&) {
    return {};
  }
  static void append(std::vector<torch::Tensor>& to, std::vector<torch::Tensor> from) {
    to.insert(to.end(), from.begin(), from.end());
  }

  template <typename T>
  struct is_sequential
      : std::bool_constant<
            std::is_same_v<std::decay_t<T>, torch::nn::Sequential> ||
            std::is_same_v<std::decay_t<T>, std::shared_ptr<torch::nn::SequentialImpl>>> {};

  std::shared_ptr<torch::nn::Module> wrapped_;
  torch::nn::AnyModule any_;  // the wrapped module, unless it is a Sequential
  torch::nn::Sequential sequential_{nullptr};
  DistributedDataParallelOptions options_;
  ProcessGroupPtr group_;
  std::vector<torch::Tensor> buffers_;  // the wrapped module's, broadcast before forward
  std::unique_ptr<Reducer> reducer_;
  // mixed_precision with a param_dtype: the parameters it lowers; else null.
  std::shared_ptr<detail::LowPrecisionParams> low_precision_;
  // Lowered for a forward whose backward has not ended (set on the training
  // thread, cleared where the backward ends).
  std::atomic<bool> awaiting_backward_{false};
  // set_join_shadow_batch's forward on the wrapped module; empty when not set.
  std::function<std::vector<torch::Tensor>()> join_shadow_forward_;
  bool require_backward_grad_sync_ = true;  // false inside no_sync
  int64_t divisor_ = 0;         // what the Reducer divides gradients by (0: not set yet)
  bool uneven_inputs_ = false;  // told the Reducer that ranks may run different no_sync passes
  // With DDP_TIMELINE (ddp/timeline.h), else null. After reducer_: it reads
  // the last statistics when it goes, so it must go first.
  std::shared_ptr<detail::ModuleTimeline> timeline_;
};

TORCH_MODULE(DistributedDataParallel);

// Collective over `group` (default: ddp::default_process_group()):
// InvalidArgument on every rank unless every rank's `module` holds the same
// parameters and buffers as rank 0's: names, dtypes, shapes and values, bit
// for bit. The error names the first that differs and the ranks that differ
// from rank 0 (its peers). For callers that made the ranks identical
// themselves and construct DDP with init_sync(false):
//   load_my_checkpoint(net);
//   ddp::verify_same_model(*net);
//   ddp::DistributedDataParallel model(net, DistributedDataParallelOptions().init_sync(false));
// Four collectives (a fifth on an error), of a few bytes per tensor; the
// values are hashed on the host (a device copy for CUDA tensors).
void verify_same_model(const torch::nn::Module& module, ProcessGroupPtr group = nullptr);

}  // namespace ddp
