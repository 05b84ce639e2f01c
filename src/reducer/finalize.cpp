// The finalizing step (after Algorithm 1's line 21, which the paper omits):
// at the end of backward, finalize_backward() launches what is left with
// zeros for the missing gradients, exchanges one small status, waits, checks
// and writes the averages back, or raises on every rank alike. Join's shadow
// iteration issues the same collectives with nothing to contribute.
#include "reducer/reducer_impl.h"

#include "base/mutex.h"

#include "reducer/iteration_stats.h"

#include "compat/torch_compat.h"

#include <c10/core/GradMode.h>

#include <iostream>

namespace ddp {

// Created with mutex_ held, destroyed before it is released.
Reducer::Impl::BackToIdle::~BackToIdle() {
  impl.it_.phase = Phase::IDLE;
  impl.it_.joined = false;  // a later no_sync pass accumulates for this rank again
  if (!impl.end_of_backward_) return;
  try {
    if (impl.end_of_backward_()) impl.hook_gradients();
  } catch (const std::exception& e) {  // never out of a destructor
    std::cerr << "ddp: rank " << impl.group_->rank()
              << ": the end-of-backward step of mixed precision failed: " << e.what()
              << std::endl;
  }
}

void Reducer::Impl::at_end_of_synchronized_backward(std::function<bool()> callback) {
  MutexLock lock(mutex_);
  end_of_backward_ = std::move(callback);
}

// At the end of backward, on the autograd thread; what it throws comes out
// of backward() on every rank alike.
void Reducer::Impl::finalize_backward() {
  MutexLock lock(mutex_);
  it_.phase = Phase::FINALIZING;
  BackToIdle back_to_idle{*this};
  const Clock::time_point compute_end = it_.last_hook;
  if (options_.static_graph() && !static_graph_.learned()) learn_static_graph();
  detail::IterationOutcome mine;
  mine.missing = launch_the_rest_with_zeros_for_missing();
  if (it_.joined) mine.missing.clear();  // a joined rank's replay reports nothing missing
  Clock::time_point comm_end = *it_.comm_start;
  // Hooks issue collectives from the communication thread: let them all
  // finish before this thread issues its own, so the order is the same on
  // every rank. Without hooks the buckets' allreduces are already queued.
  if (hook_runner_) comm_end = buckets_.wait_all(*group_, comm_end);
  const detail::IterationStatus status = exchange_status(mine, comm_end);
  agreement_.decide(status, mine, names_);
  end_synchronized_iteration(status);
  if (!it_.joined) finish_stats(compute_end, comm_end);
}

// Join: this rank is out of inputs while others train. The collectives
// of one synchronized backward, contributing nothing: the rebuild's
// broadcast when due, every bucket as zeros (through the hook if there is
// one), the status marked joined; then the averages are written back as on
// the others. What no_sync passes accumulated here is dropped.
void Reducer::Impl::shadow_iteration() {
  MutexLock lock(mutex_);
  begin_synchronized_iteration(/*joined=*/true);
  it_.phase = Phase::SHADOWING;
  BackToIdle back_to_idle{*this};
  launch_the_rest_with_zeros_for_missing();  // every parameter
  Clock::time_point comm_end = *it_.comm_start;
  if (hook_runner_) comm_end = buckets_.wait_all(*group_, comm_end);
  detail::IterationOutcome mine;  // nothing missing: a joined rank contributes nothing
  const detail::IterationStatus status = exchange_status(mine, comm_end);
  agreement_.decide(status, mine, names_);
  end_synchronized_iteration(status);
}

// Every rank, joined or not, ends with the same gradients.
void Reducer::Impl::end_synchronized_iteration(const detail::IterationStatus& status) {
  last_ended_ = true;
  write_back_averages(status);
  if (!options_.gradient_as_bucket_view()) buckets_.swap_buffers();
  gradient_order_.end_iteration(params_.size());
}

// static_graph's first iteration launched nothing during backward: now
// that it knows the graph, in the order gradients arrived.
void Reducer::Impl::learn_static_graph() {
  static_graph_.learn(it_.arrivals);
  for (size_t i : static_graph_.arrival_order()) mark_ready(i);
  for (size_t i : static_graph_.unused()) mark_ready_without_gradient(i);
}

// Parameters that got no gradient are launched as zeros anyway, so that
// every rank issues the same collectives; they are reported, not written.
std::vector<size_t> Reducer::Impl::launch_the_rest_with_zeros_for_missing() {
  std::vector<size_t> missing;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (it_.ready[i]) continue;
    missing.push_back(i);
    detach_grad_from_bucket(i);
    fill_slot(i, {});
    it_.ready[i] = true;
    --buckets_.of(i).pending;
  }
  launch_ready_buckets();
  return missing;
}

// The agreement's allreduce (iteration_agreement.h): the used-parameter
// bitmap, then what each rank did this iteration. `mine` gets the tally and
// the broken hints. Returns when it and every bucket are reduced;
// `comm_end` becomes the last bucket's completion.
detail::IterationStatus Reducer::Impl::exchange_status(detail::IterationOutcome& mine,
                                                       Clock::time_point& comm_end) {
  mine.tally = detail::take_tally(*group_);
  mine.joined = it_.joined;
  mine.hints_broken = layer_drop_.take_violations();
  const int64_t n = has_bitmap() ? static_cast<int64_t>(params_.size()) : 0;
  detail::IterationStatus status = agreement_.status(n, mine);
  if (has_bitmap()) status.bitmap().copy_(local_used_);
  auto status_work = group_->allreduce(status.tensor());
  if (!hook_runner_) comm_end = buckets_.wait_all(*group_, comm_end);
  status_work->wait();
  local_used_.zero_();
  return status;
}

// Each gradient becomes its slice of the reduced bucket: no copy. Without
// gradient_as_bucket_view the buckets are then swapped with spares, so
// the next iteration communicates in other memory than the gradients.
// A parameter no rank used keeps its gradient untouched, except on a rank
// that joined: its gradient is stale there (its own last step's), where the
// training ranks' zero_grad() cleared theirs, and an optimizer that steps
// here (a ZeRO shard's owner) must see what they see.
void Reducer::Impl::write_back_averages(const detail::IterationStatus& status) {
  stats_pending_.unused_parameters = 0;
  const int32_t* used = status.tensor().data_ptr<int32_t>();
  const std::vector<bool>& dropped = layer_drop_.dropped();
  for (size_t i = 0; i < params_.size(); ++i) {
    const bool hinted = !dropped.empty() && dropped[i];  // untouched, as an unused one
    if (hinted && it_.joined) {                          // stale here, as for an unused one below
      if (!packs()) detach_grad_from_bucket(i);
      compat::clear_as_zero_grad_does(params_[i].mutable_grad());
    }
    if (hinted) continue;
    if (has_bitmap() && used[i] == 0) {
      ++stats_pending_.unused_parameters;
      if (debug_ == detail::DebugLevel::DETAIL) {
        stats_pending_.unused_parameter_names.push_back(names_[i]);
      }
      if (it_.joined) {
        detach_grad_from_bucket(i);
        compat::clear_as_zero_grad_does(params_[i].mutable_grad());
      }
      continue;
    }
    const at::Tensor& view = buckets_.view(i);
    params_[i].mutable_grad() =
        view.scalar_type() == dtypes_[i] ? view : view.to(dtypes_[i]);  // reduce_dtype's
  }
}

// A gradient that aliases its bucket slice is given its own memory before
// the slice is overwritten with something that is not its gradient.
void Reducer::Impl::detach_grad_from_bucket(size_t i) {
  at::Tensor& grad = params_[i].mutable_grad();
  if (grad.defined() && grad.data_ptr() == buckets_.view(i).data_ptr()) grad = grad.clone();
}

void Reducer::Impl::finish_stats(Clock::time_point compute_end, Clock::time_point comm_end) {
  stats_pending_.iteration = ++iterations_;
  stats_pending_.synchronized = true;
  detail::record_timings(stats_pending_, it_, buckets_, compute_end, comm_end);
  stats_ = stats_pending_;
  if (debug_ != detail::DebugLevel::OFF) {
    std::cerr << "ddp[rank " << group_->rank() << "]: " << stats_.summary() << std::endl;
  }
}

}  // namespace ddp
