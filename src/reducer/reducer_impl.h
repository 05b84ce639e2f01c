// Reducer::Impl: the Reducer's state and steps. reducer.cpp holds
// Algorithm 1's construction, forward and autograd_hook; finalize.cpp the
// finalizing step the paper omits, and Join's shadow iteration.
#pragma once

#include <ddp/reducer.h>

#include "base/env.h"
#include "base/mutex.h"
#include "hooks/hook_runner.h"
#include "reducer/autograd_hooks.h"
#include "reducer/bucket_set.h"
#include "reducer/bucket_tuner.h"
#include "reducer/copy_streams.h"
#include "reducer/gradient_order.h"
#include "reducer/iteration.h"
#include "reducer/iteration_agreement.h"
#include "reducer/layer_drop.h"
#include "reducer/static_graph.h"

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ddp {

class Reducer::Impl {
 public:
  using Clock = detail::Iteration::Clock;
  using Phase = detail::Phase;

  // `module_checks`: DistributedDataParallel's own set-up checks, agreed on
  // with the Reducer's (empty: a Reducer used alone).
  Impl(std::vector<at::Tensor> params, std::vector<std::string> names, ProcessGroupPtr group,
       ReducerOptions options, const std::function<void()>& module_checks = {});
  ~Impl();

  // The Reducer's public operations (reducer.h).
  void prepare_for_backward(const std::vector<at::Tensor>& outputs, bool synchronize);
  void shadow_iteration();
  void prepare_for_shadow_backward(const std::vector<at::Tensor>& outputs);
  void set_divisor(int64_t ranks);
  void set_uneven_inputs(bool uneven);
  bool has_comm_hook() const;
  void set_comm_hook(CommHook hook, HookStateIO state);
  std::optional<HookStateDict> hook_state() const;
  void load_hook_state(const HookStateDict& dict);
  Reducer::BucketLayout bucket_layout() const;
  bool restore_bucket_layout(const Reducer::BucketLayout& layout);
  void hint_unused(const std::vector<at::Tensor>& params);
  void record_forward_time(double forward_ms);
  void parameters_replaced();
  void at_end_of_synchronized_backward(std::function<bool()> callback);
  IterationStats stats() const;
  std::vector<std::vector<size_t>> bucket_indices() const;
  const ProcessGroupPtr& group() const { return group_; }

 private:
  // Leaves the phase IDLE however the step ends, after running the
  // module's end-of-backward callback (at_end_of_synchronized_backward).
  struct BackToIdle {
    Impl& impl;
    ~BackToIdle() DDP_NO_THREAD_SAFETY_ANALYSIS;  // runs where mutex_ is held
  };

  // reducer.cpp: forward and autograd_hook. The steps below expect mutex_
  // held: the public operations and autograd_hook take it.
  // `joined`: Join's replay on a rank out of inputs.
  void begin_synchronized_iteration(bool joined) DDP_REQUIRES(mutex_);
  void check_arguments() const;          // this rank's own, at construction
  void check_same_collective_options();  // collective, at construction
  // Backward start and, with find_unused_parameters, the unreached parameters.
  void watch_outputs(const std::vector<at::Tensor>& outputs) DDP_REQUIRES(mutex_);
  // Cuts `sequence` into buckets of `cap` bytes (the first one small); they
  // become bucket_sequence_ and bucket_cap_ once the buckets are built.
  void build_buckets(std::vector<size_t> sequence, int64_t cap) DDP_REQUIRES(mutex_);
  // The per-bucket caps for a later-bucket `cap`: bucket_caps_bytes when
  // set, else {first_bucket_cap_bytes, cap}.
  std::vector<int64_t> bucket_caps(int64_t cap) const;
  void hook_gradients() DDP_REQUIRES(mutex_);
  // The parameters as the buckets were cut at construction: their shapes,
  // devices and construction dtypes (mixed precision lowers them between
  // forward and backward; bucket caps count the parameters' own bytes).
  std::vector<at::Tensor> as_constructed() const;
  void on_backward_start() DDP_EXCLUDES(mutex_);
  void queue_finalize() DDP_REQUIRES(mutex_);
  void autograd_hook(size_t i) DDP_EXCLUDES(mutex_);
  void mark_ready(size_t i) DDP_REQUIRES(mutex_);
  void mark_ready_without_gradient(size_t i) DDP_REQUIRES(mutex_);
  void fill_slot(size_t i, const at::Tensor& grad) DDP_REQUIRES(mutex_);
  void contribute(at::Tensor& view, const at::Tensor& grad) DDP_REQUIRES(mutex_);
  void fill_staged(detail::Bucket& b) DDP_REQUIRES(mutex_);
  void set_ready(size_t i) DDP_REQUIRES(mutex_);
  void launch_ready_buckets() DDP_REQUIRES(mutex_);
  // Layer-drop hints: the hinted parameters are ready at once; packed out
  // of their buckets where the buckets are the Reducer's alone (no hook
  // reads them, no gradient is a view of them), else sent as zeros.
  void leave_out_dropped() DDP_REQUIRES(mutex_);
  // Packs `out` out of their buckets and counts them ready (packs() only).
  void pack_out(const std::vector<bool>& out) DDP_REQUIRES(mutex_);
  // skip_all_reduce_unused_params: the parameters in `unused` that nothing
  // accumulated are left out of their buckets (checked alike on every rank
  // with DDP_DEBUG=detail); the others become ready as zeros (or with what
  // no_sync passes accumulated).
  void leave_out_unused(const std::vector<bool>& unused) DDP_REQUIRES(mutex_);
  // Whether unused parameters are packed out this iteration.
  bool skips_unused() const DDP_REQUIRES(mutex_) {
    return options_.skip_all_reduce_unused_params() && packs() && !uneven_inputs_;
  }
  bool packs() const DDP_REQUIRES(mutex_) {
    return !options_.gradient_as_bucket_view() && !hook_runner_;
  }

  // autotune.cpp: bucket autotuning (autotune_caps_bytes).
  bool autotuning() const { return !options_.autotune_caps_bytes().empty(); }
  void check_autotune_options() const;
  int64_t next_bucket_cap(const std::vector<size_t>& sequence) DDP_REQUIRES(mutex_);
  std::vector<int64_t> distinct_caps(const std::vector<size_t>& sequence) const;
  void record_bucket_tuning() DDP_REQUIRES(mutex_);

  // finalize.cpp: the finalizing step.
  void finalize_backward() DDP_EXCLUDES(mutex_);
  void learn_static_graph() DDP_REQUIRES(mutex_);
  std::vector<size_t> launch_the_rest_with_zeros_for_missing() DDP_REQUIRES(mutex_);
  detail::IterationStatus exchange_status(detail::IterationOutcome& mine,
                                          Clock::time_point& comm_end) DDP_REQUIRES(mutex_);
  void write_back_averages(const detail::IterationStatus& status) DDP_REQUIRES(mutex_);
  void end_synchronized_iteration(const detail::IterationStatus& status) DDP_REQUIRES(mutex_);
  void detach_grad_from_bucket(size_t i) DDP_REQUIRES(mutex_);
  void finish_stats(Clock::time_point compute_end, Clock::time_point comm_end) DDP_REQUIRES(mutex_);
  bool has_bitmap() const { return options_.find_unused_parameters() || options_.static_graph(); }

  const std::vector<at::Tensor> params_;
  const std::vector<std::string> names_;
  // Each parameter's dtype at construction, its gradients' after a
  // reduction in another (reduce_dtype; mixed precision lowers parameters
  // in between).
  std::vector<at::ScalarType> dtypes_;
  const ProcessGroupPtr group_;
  const ReducerOptions options_;
  const detail::DebugLevel debug_;
  const std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // token for graph hooks

  // Hooks run on the autograd thread, the rest on the training thread: one
  // mutex for the state below.
  mutable Mutex mutex_;
  detail::Iteration it_ DDP_GUARDED_BY(mutex_);
  detail::BucketSet buckets_ DDP_GUARDED_BY(mutex_);
  detail::CopyStreams copy_streams_ DDP_GUARDED_BY(mutex_);
  at::Tensor local_used_ DDP_GUARDED_BY(mutex_);  // int32, accumulated over no_sync
  detail::GradientOrder gradient_order_ DDP_GUARDED_BY(mutex_);
  // The buckets: parameters in this order, cut at this size; rebuilt
  // `layout_` times (GradBucket::layout).
  std::vector<size_t> bucket_sequence_ DDP_GUARDED_BY(mutex_);
  int64_t bucket_cap_ DDP_GUARDED_BY(mutex_) = 0;
  int64_t layout_ DDP_GUARDED_BY(mutex_) = -1;
  std::optional<detail::BucketTuner> tuner_ DDP_GUARDED_BY(mutex_);  // from the second iteration
  // When the last synchronized iteration (shadowed ones included) began,
  // and whether it ended with its checks passed: while tuning, an iteration
  // lasts from its beginning to the next one's.
  std::optional<Clock::time_point> last_begin_ DDP_GUARDED_BY(mutex_);
  bool last_ended_ DDP_GUARDED_BY(mutex_) = false;
  detail::StaticGraph static_graph_ DDP_GUARDED_BY(mutex_);
  detail::LayerDrop layer_drop_ DDP_GUARDED_BY(mutex_){params_};
  int64_t iterations_ DDP_GUARDED_BY(mutex_) = 0;      // synchronized ones completed
  bool uneven_inputs_ DDP_GUARDED_BY(mutex_) = false;  // set_uneven_inputs
  // What this rank reports at the end of each synchronized backward, and the
  // decision the ranks take together (constructed once group_ is checked).
  detail::IterationAgreement agreement_ DDP_GUARDED_BY(mutex_);
  // What gradients are divided by: the world size, unless set_divisor.
  at::Tensor divisor_ DDP_GUARDED_BY(mutex_) =
      at::scalar_tensor(static_cast<double>(group_ ? group_->size() : 1), at::kDouble);
  IterationStats stats_pending_ DDP_GUARDED_BY(mutex_);
  IterationStats stats_ DDP_GUARDED_BY(mutex_);
  std::unique_ptr<detail::HookRunner> hook_runner_
      DDP_GUARDED_BY(mutex_);                      // set once, before training
  HookStateIO hook_state_ DDP_GUARDED_BY(mutex_);  // with hook_runner_
  std::function<bool()> end_of_backward_ DDP_GUARDED_BY(mutex_);
  // Last member: hooks go first at destruction, before the state they use.
  std::vector<std::unique_ptr<GradReadyHook>> hooks_ DDP_GUARDED_BY(mutex_);
};

}  // namespace ddp
