// Reducer::Impl: the Reducer's state and steps. reducer.cpp holds
// Algorithm 1's construction, forward and autograd_hook; finalize.cpp the
// finalizing step the paper omits, and Join's shadow iteration.
#pragma once

#include <ddp/reducer.h>

#include "hooks/hook_runner.h"
#include "reducer/autograd_hooks.h"
#include "reducer/bucket_set.h"
#include "reducer/copy_streams.h"
#include "reducer/gradient_order.h"
#include "reducer/iteration.h"
#include "reducer/iteration_status.h"
#include "reducer/static_graph.h"
#include "rendezvous/env.h"

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ddp {

class Reducer::Impl {
 public:
  using Clock = detail::Iteration::Clock;
  using Phase = detail::Phase;

  Impl(std::vector<at::Tensor> params, std::vector<std::string> names, ProcessGroupPtr group,
       ReducerOptions options);
  ~Impl();

  // The Reducer's public operations (reducer.h).
  void prepare_for_backward(const std::vector<at::Tensor>& outputs, bool synchronize);
  void shadow_iteration();
  void prepare_for_shadow_backward(const std::vector<at::Tensor>& outputs);
  void set_divisor(int64_t ranks);
  void set_uneven_inputs(bool uneven);
  bool has_comm_hook() const;
  void set_comm_hook(CommHook hook);
  void record_forward_time(double forward_ms);
  IterationStats stats() const;
  std::vector<std::vector<size_t>> bucket_indices() const;
  const ProcessGroupPtr& group() const { return group_; }

 private:
  // Leaves the phase IDLE however the step ends.
  struct BackToIdle {
    detail::Iteration& it;
    ~BackToIdle() {
      it.phase = Phase::IDLE;
      it.joined = false;  // a later no_sync pass accumulates for this rank again
    }
  };

  // reducer.cpp: forward and autograd_hook.
  void begin_synchronized_iteration();
  void check_same_zero_copy_option();  // collective, at construction
  // Backward start and, with find_unused_parameters, the unreached parameters.
  void watch_outputs(const std::vector<at::Tensor>& outputs);
  void build_buckets(const std::vector<size_t>& sequence);
  void on_backward_start();
  void queue_finalize();
  void autograd_hook(size_t i);
  void mark_ready(size_t i);
  void mark_ready_without_gradient(size_t i);
  void contribute(at::Tensor& view, const at::Tensor& grad);
  void write_bucket(const at::Tensor& view, const at::Tensor& grad,
                    const std::function<void()>& write);
  void set_ready(size_t i);
  void launch_ready_buckets();

  // finalize.cpp: the finalizing step.
  void finalize_backward();
  void learn_static_graph();
  std::vector<size_t> launch_the_rest_with_zeros_for_missing();
  detail::IterationStatus exchange_status(const std::vector<size_t>& missing,
                                          Clock::time_point& comm_end);
  void check_reports(const std::vector<detail::RankReport>& reports,
                     const std::vector<size_t>& missing);
  void write_back_averages(const detail::IterationStatus& status);
  void end_synchronized_iteration(const detail::IterationStatus& status);
  void detach_grad_from_bucket(size_t i);
  void finish_stats(Clock::time_point compute_end, Clock::time_point comm_end);
  bool has_bitmap() const { return options_.find_unused_parameters() || options_.static_graph(); }

  const std::vector<at::Tensor> params_;
  const std::vector<std::string> names_;
  const ProcessGroupPtr group_;
  const ReducerOptions options_;
  const detail::DebugLevel debug_;
  const std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // token for graph hooks

  // Hooks run on the autograd thread, the rest on the training thread: one
  // mutex for the state below.
  mutable std::mutex mutex_;
  detail::Iteration it_;                  // guarded by mutex_
  detail::BucketSet buckets_;             // guarded by mutex_
  detail::CopyStreams copy_streams_;      // guarded by mutex_
  at::Tensor local_used_;                 // guarded by mutex_; int32, accumulated over no_sync
  detail::GradientOrder gradient_order_;  // guarded by mutex_
  detail::StaticGraph static_graph_;      // guarded by mutex_
  int64_t iterations_ = 0;                // guarded by mutex_; synchronized ones completed
  int64_t forwards_ = 0;        // guarded by mutex_; forward passes, no_sync ones unless uneven
  bool uneven_inputs_ = false;  // guarded by mutex_; set_uneven_inputs
  int64_t stray_after_ = -1;    // guarded by mutex_; >= 0: a stray backward ran after forward #this
  // guarded by mutex_; what gradients are divided by: the world size, unless set_divisor
  at::Tensor divisor_ = at::scalar_tensor(static_cast<double>(group_->size()), at::kDouble);
  IterationStats stats_pending_, stats_;             // guarded by mutex_
  std::unique_ptr<detail::HookRunner> hook_runner_;  // guarded by mutex_; set once, before training
  // Last member: hooks go first at destruction, before the state they use.
  std::vector<std::unique_ptr<detail::GradReadyHook>> hooks_;
};

}  // namespace ddp
