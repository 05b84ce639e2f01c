// The Reducer (paper Algorithm 1).
//
// Per iteration, in REDUCE mode: each gradient hook copies its gradient,
// divided by the world size, into its bucket slice (or makes the gradient
// that slice, with gradient_as_bucket_view) and decrements the bucket's
// pending count; buckets whose count reaches zero are launched strictly in
// index order. Parameters found unused by the graph walk are ready at once,
// contributing zeros (or what they accumulated under no_sync). At the end of
// backward (an engine callback) the rest is launched, one small allreduce
// carries the used-parameter bitmap and each rank's count of parameters that
// got no gradient, everything is waited for, and the averages are written
// back — unless some rank lacked a gradient, then every rank throws.
//
// In ACCUMULATE mode (no_sync) hooks only remember which parameters were
// used; the first REDUCE iteration after reduces the accumulated gradients.
#include <ddp/reducer.h>

#include <ddp/bucket.h>
#include <ddp/errors.h>

#include "reducer/autograd_hooks.h"
#include "reducer/bucket_set.h"
#include "reducer/iteration_status.h"
#include "rendezvous/env.h"
#include "hooks/hook_runner.h"
#include "module/model_sync.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <iostream>
#include <mutex>

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

double ms(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

class Reducer::Impl {
 public:
  Impl(std::vector<at::Tensor> params, std::vector<std::string> names, ProcessGroupPtr group,
       ReducerOptions options)
      : params_(std::move(params)),
        names_(std::move(names)),
        group_(std::move(group)),
        options_(options),
        debug_(detail::debug_level_from_env()) {
    if (!group_) throw InvalidArgument("ddp: Reducer: no process group given");
    if (names_.size() != params_.size()) {
      throw InvalidArgument("ddp: Reducer: " + std::to_string(params_.size()) +
                            " parameters but " + std::to_string(names_.size()) + " names");
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!params_[i].requires_grad()) {
        throw InvalidArgument("ddp: Reducer: parameter #" + std::to_string(i) + " '" +
                              names_[i] + "' does not require grad; leave it out");
      }
    }
    detail::verify_same_tensors(*group_, params_, names_, "parameters");
    if (params_.empty()) {
      throw InvalidArgument("ddp: rank " + std::to_string(group_->rank()) +
                            ": the model has no parameter that requires grad: there is "
                            "nothing to synchronize (check requires_grad and "
                            "parameters_to_ignore)");
    }
    const size_t n = params_.size();
    ready_.assign(n, false);
    arrivals_.assign(n, 0);
    local_used_ = at::zeros({static_cast<int64_t>(n)}, at::kInt);
    build_buckets(assign_buckets(params_, reverse_order(n), options_.first_bucket_cap_bytes(),
                                 options_.bucket_cap_bytes()));
    for (size_t i = 0; i < n; ++i) {
      hooks_.push_back(std::make_unique<detail::GradReadyHook>(params_[i], [this, i] {
        on_grad_ready(i);
      }));
    }
  }

  ~Impl() {
    if (stray_after_ >= 0) {  // no later iteration reported it to the other ranks
      std::cerr << "ddp: rank " << group_->rank() << ": warning: a backward() that no DDP "
                << "forward prepared ran after forward pass #" << stray_after_
                << " (backward() twice after one forward?); its gradients were not averaged, "
                << "so this replica differs from the others" << std::endl;
    }
  }

  void prepare_for_backward(const std::vector<at::Tensor>& outputs, bool synchronize) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++forwards_;
    if (!synchronize) {
      mode_ = Mode::ACCUMULATE;
      return;
    }
    stats_pending_ = IterationStats{};
    if (rebuild_due_) rebuild_buckets();
    start_iteration();
    mode_ = Mode::REDUCE;
    for (const auto& out : outputs) {
      detail::at_backward_start(out, [this, token = std::weak_ptr<int>(alive_)] {
        if (token.lock()) note_backward_start();
      });
    }
    if (options_.find_unused_parameters()) {
      auto reached = detail::reachable_nodes(outputs);
      for (size_t i = 0; i < params_.size(); ++i) {
        if (!reached.count(hooks_[i]->accumulator())) mark_unused_ready(i);
      }
    } else if (options_.static_graph() && static_learned_) {
      for (size_t i : static_unused_) mark_unused_ready(i);
    }
  }

  void set_comm_hook(CommHook hook) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string where = "ddp: rank " + std::to_string(group_->rank()) + ": register_comm_hook: ";
    if (!hook) throw InvalidArgument(where + "the hook is empty");
    if (hook_runner_) throw InvalidArgument(where + "a hook is already registered; register once");
    if (iterations_ > 0 || mode_ != Mode::IDLE) {
      throw InvalidArgument(where + "training has started; register the hook before the first "
                                    "forward/backward");
    }
    hook_runner_ = std::make_unique<detail::HookRunner>(std::move(hook));
  }

  void record_forward_time(double forward_ms) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_pending_.forward_ms = forward_ms;
  }

  IterationStats last_stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  std::vector<std::vector<size_t>> bucket_indices() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::vector<size_t>> out;
    for (const auto& b : buckets_.all()) out.push_back(b.params);
    return out;
  }

  const ProcessGroupPtr& group() const { return group_; }

 private:
  enum class Mode { IDLE, ACCUMULATE, REDUCE };

  // --- buckets ---------------------------------------------------------
  void build_buckets(const std::vector<std::vector<size_t>>& assignment) {
    buckets_ = detail::BucketSet(params_, assignment, options_.gradient_as_bucket_view());
  }

  // Rank 0's first-iteration ready order, on every rank (§6.2.1).
  void rebuild_buckets() {
    rebuild_due_ = false;
    at::Tensor order = at::tensor(std::vector<int64_t>(ready_order_.begin(), ready_order_.end()),
                                  at::kLong);
    group_->broadcast(order, 0)->wait();
    std::vector<size_t> sequence(order.data_ptr<int64_t>(),
                                 order.data_ptr<int64_t>() + order.numel());
    build_buckets(assign_buckets(params_, sequence, options_.first_bucket_cap_bytes(),
                                 options_.bucket_cap_bytes()));
    stats_pending_.buckets_rebuilt = true;
  }

  // --- one iteration ---------------------------------------------------
  void start_iteration() {
    std::fill(ready_.begin(), ready_.end(), false);
    std::fill(arrivals_.begin(), arrivals_.end(), 0);
    for (size_t k = 0; k < buckets_.size(); ++k) {
      detail::Bucket& b = buckets_[k];
      // A bucket launched for an earlier forward that saw no backward.
      if (b.work && !b.work->is_completed()) b.work->wait();
      if (b.future) detail::wait_for(b.future, group_->timeout(), "communication hook");
      b.pending = b.params.size();
      b.work.reset();
      b.future.reset();
    }
    next_launch_ = 0;
    finalize_queued_ = false;
    backward_started_ = false;
    launched_any_ = false;
    record_order_ = !order_recorded_;
    if (record_order_) ready_order_.clear();
  }

  // Backward reached a forward output: the outermost backward pass has
  // started, so the end-of-backward callback goes to it (a gradient hook may
  // first fire inside a reentrant backward, e.g. checkpointing).
  void note_backward_start() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (mode_ != Mode::REDUCE) return;
    if (!backward_started_) {
      backward_started_ = true;
      backward_start_ = Clock::now();
    }
    queue_finalize();
  }

  void queue_finalize() {
    if (finalize_queued_) return;
    finalize_queued_ = true;
    detail::at_end_of_backward([this] { finalize(); });
  }

  void on_grad_ready(size_t i) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (mode_ == Mode::IDLE) {  // not reduced: reported to every rank in the next status
      if (stray_after_ < 0) stray_after_ = forwards_;
      return;
    }
    local_used_.data_ptr<int32_t>()[i] = 1;
    if (mode_ == Mode::ACCUMULATE) return;
    last_hook_ = Clock::now();
    if (!backward_started_) {  // no forward output on the path: start here
      backward_started_ = true;
      backward_start_ = last_hook_;
    }
    queue_finalize();
    ++arrivals_[i];
    if (options_.static_graph()) {
      if (!static_learned_) {  // first iteration: only observe
        if (arrivals_[i] == 1) static_arrival_order_.push_back(i);
        return;
      }
      if (arrivals_[i] < expected_arrivals_[i]) return;  // more to come
      if (arrivals_[i] > expected_arrivals_[i]) {
        throw InvalidArgument(
            "ddp: rank " + std::to_string(group_->rank()) + ": parameter #" +
            std::to_string(i) + " '" + names_[i] + "' got " + std::to_string(arrivals_[i]) +
            " gradients in this backward pass but " + std::to_string(expected_arrivals_[i]) +
            " in the first one: the graph is not static; construct DistributedDataParallel "
            "without static_graph");
      }
    } else if (ready_[i]) {
      throw InvalidArgument(
          "ddp: rank " + std::to_string(group_->rank()) + ": parameter #" + std::to_string(i) +
          " '" + names_[i] + "' got its gradient twice in one backward pass (reentrant "
          "backward or activation checkpointing). Construct DistributedDataParallel with "
          "static_graph(true) so that the arrivals are counted.");
    }
    mark_ready(i);
  }

  void mark_ready(size_t i) {
    at::NoGradGuard no_grad;
    at::Tensor& view = bucket_view(i);
    at::Tensor& grad = params_[i].mutable_grad();
    if (grad.defined()) {
      if (hook_runner_) {  // the hook averages
        if (grad.data_ptr() != view.data_ptr()) view.copy_(grad);
      } else if (grad.data_ptr() == view.data_ptr()) {
        view.div_(world_size_);
      } else {
        at::div_out(view, grad, world_size_);  // copy and average in one pass
      }
      if (options_.gradient_as_bucket_view()) grad = view;
    } else {
      view.zero_();
    }
    if (record_order_) ready_order_.push_back(i);
    set_ready(i);
  }

  // Ready without a gradient this pass: contributes what no_sync passes
  // accumulated, else zeros. A gradient that is a bucket view is detached
  // first, so that a globally unused parameter keeps it untouched.
  void mark_unused_ready(size_t i) {
    at::NoGradGuard no_grad;
    at::Tensor& view = bucket_view(i);
    at::Tensor& grad = params_[i].mutable_grad();
    const bool accumulated = local_used_.data_ptr<int32_t>()[i] != 0 && grad.defined();
    detach_grad_from_bucket(i);
    if (accumulated && hook_runner_) {
      view.copy_(grad);
    } else if (accumulated) {
      at::div_out(view, grad, world_size_);
    } else {
      view.zero_();
    }
    set_ready(i);
  }

  void set_ready(size_t i) {
    ready_[i] = true;
    if (--buckets_.of(i).pending == 0 && options_.overlap_communication()) {
      launch_ready_buckets();
    }
  }

  void launch_ready_buckets() {
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
      if (!launched_any_) {
        launched_any_ = true;
        comm_start_ = Clock::now();
      }
      detail::Bucket& b = buckets_[next_launch_];
      b.launched = Clock::now();
      if (hook_runner_) {
        std::vector<at::Tensor> params;
        for (size_t i : b.params) params.push_back(params_[i]);
        b.future = hook_runner_->submit(GradBucket(next_launch_, next_launch_ + 1 == buckets_.size(),
                                                   b.flat, std::move(params)));
      } else {
        b.work = group_->allreduce(b.flat);
      }
      ++next_launch_;
    }
  }

  at::Tensor& bucket_view(size_t i) { return buckets_.view(i); }

  // --- end of backward -------------------------------------------------
  void finalize() {
    std::lock_guard<std::mutex> lock(mutex_);
    struct Reset {
      Mode& mode;
      ~Reset() { mode = Mode::IDLE; }
    } reset{mode_};
    const auto compute_end = last_hook_;
    if (options_.static_graph() && !static_learned_) learn_static_graph();

    std::vector<size_t> missing;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (ready_[i]) continue;
      missing.push_back(i);
      detach_grad_from_bucket(i);
      bucket_view(i).zero_();  // launched anyway: every rank issues the same collectives
      ready_[i] = true;
      --buckets_.of(i).pending;
    }
    launch_ready_buckets();

    // Hooks issue collectives from the communication thread: let them all
    // finish before this thread issues its own, so the order is the same on
    // every rank. Without hooks the buckets' allreduces are already queued.
    Clock::time_point comm_end = comm_start_;
    if (hook_runner_) comm_end = buckets_.wait_all(*group_, comm_start_);

    // One small allreduce: the used-parameter bitmap, then per rank what it
    // did this iteration (see iteration_status.h).
    const bool bitmap = options_.find_unused_parameters() || options_.static_graph();
    const int64_t n = bitmap ? static_cast<int64_t>(params_.size()) : 0;
    detail::IterationStatus status(n, group_->rank(), group_->size());
    if (bitmap) status.bitmap().copy_(local_used_);
    detail::RankReport mine;
    mine.missing = static_cast<int32_t>(missing.size());
    mine.forwards = static_cast<int32_t>(forwards_);
    mine.stray_after = static_cast<int32_t>(stray_after_);
    mine.tally = group_->take_tally();
    status.write(mine);
    auto status_work = group_->allreduce(status.tensor());
    if (!hook_runner_) comm_end = buckets_.wait_all(*group_, comm_start_);
    status_work->wait();
    local_used_.zero_();
    check_reports(status.read(), missing);

    stats_pending_.unused_parameters = 0;
    const int32_t* used = status.tensor().data_ptr<int32_t>();
    for (size_t i = 0; i < params_.size(); ++i) {
      if (bitmap && used[i] == 0) {  // globally unused: gradient untouched
        ++stats_pending_.unused_parameters;
        if (debug_ == detail::DebugLevel::DETAIL) stats_pending_.unused_parameter_names.push_back(names_[i]);
        continue;
      }
      write_back(i);
    }
    if (!options_.gradient_as_bucket_view()) buckets_.swap_buffers();
    if (!order_recorded_) {
      order_recorded_ = true;
      rebuild_due_ = !options_.find_unused_parameters();
      for (size_t i = 0; i < params_.size(); ++i) {  // never arrived: at the end
        if (std::find(ready_order_.begin(), ready_order_.end(), i) == ready_order_.end()) {
          ready_order_.push_back(i);
        }
      }
    }
    finish_stats(compute_end, comm_end);
  }

  void learn_static_graph() {
    static_learned_ = true;
    expected_arrivals_ = arrivals_;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (arrivals_[i] == 0) static_unused_.push_back(i);
    }
    // First iteration: nothing was launched during backward; do it now.
    for (size_t i : static_arrival_order_) mark_ready(i);
    for (size_t i : static_unused_) mark_unused_ready(i);
  }

  // Every rank holds the same reports, so all raise together. Once raised,
  // the counters restart in step, so a program that catches the error can
  // go on (the tally restarts at every status by itself).
  void check_reports(const std::vector<detail::RankReport>& reports,
                     const std::vector<size_t>& missing) {
    stray_after_ = -1;
    forwards_ = reports[0].forwards;  // all equal, unless this raises
    detail::check_same_iteration(reports, group_->rank());
    std::string ranks;
    int64_t total = 0;
    for (int r = 0; r < group_->size(); ++r) {
      int32_t count = reports[r].missing;
      if (count == 0) continue;
      total += count;
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r) + " (" + std::to_string(count) + ")";
    }
    if (total == 0) return;
    std::string here;
    for (size_t i : missing) here += "\n  #" + std::to_string(i) + " '" + names_[i] + "'";
    throw InvalidArgument(
        "ddp: rank " + std::to_string(group_->rank()) +
        ": backward finished but some parameters got no gradient on rank(s) " + ranks +
        (missing.empty() ? std::string(" (each such rank names them)")
                         : ". On this rank:" + here) +
        "\nNo gradient was averaged or written. If some parameters are unused in some "
        "iterations, construct DistributedDataParallel with find_unused_parameters(true); "
        "otherwise make the loss depend on every parameter, or list the parameter in "
        "parameters_to_ignore.");
  }

  // The gradient becomes its slice of the reduced bucket: no copy. Without
  // gradient_as_bucket_view the buckets are then swapped with spares, so
  // the next iteration communicates in other memory than the gradients.
  void write_back(size_t i) {
    params_[i].mutable_grad() = bucket_view(i);
  }

  // A gradient that aliases its bucket slice is given its own memory before
  // the slice is overwritten with something that is not its gradient.
  void detach_grad_from_bucket(size_t i) {
    at::Tensor& grad = params_[i].mutable_grad();
    if (grad.defined() && grad.data_ptr() == bucket_view(i).data_ptr()) grad = grad.clone();
  }

  void finish_stats(Clock::time_point compute_end, Clock::time_point comm_end) {
    IterationStats& s = stats_pending_;
    s.iteration = ++iterations_;
    s.synchronized = true;
    const auto now = Clock::now();
    s.backward_compute_ms = backward_started_ ? ms(backward_start_, compute_end) : 0;
    s.finalize_ms = ms(compute_end, now);
    if (launched_any_) {
      s.communication_ms = ms(comm_start_, comm_end);
      s.overlapped_ms = std::max(0.0, ms(comm_start_, std::min(comm_end, compute_end)));
    }
    s.backward_start = backward_start_;
    for (const auto& b : buckets_.all()) {
      const int64_t bytes = b.flat.numel() * b.flat.element_size();
      s.bucket_bytes.push_back(bytes);
      s.bucket_timings.push_back({bytes, ms(backward_start_, b.launched), ms(backward_start_, b.done)});
    }
    stats_ = s;
    if (debug_ != detail::DebugLevel::OFF) {
      std::cerr << "ddp[rank " << group_->rank() << "]: " << stats_.summary() << std::endl;
    }
  }

  const std::vector<at::Tensor> params_;
  const std::vector<std::string> names_;
  const ProcessGroupPtr group_;
  const ReducerOptions options_;
  const detail::DebugLevel debug_;
  const std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // token for graph hooks
  const at::Tensor world_size_ = at::scalar_tensor(static_cast<double>(group_->size()), at::kDouble);

  mutable std::mutex mutex_;  // guards every field below
  Mode mode_ = Mode::IDLE;
  detail::BucketSet buckets_;
  std::vector<bool> ready_;           // this iteration
  std::vector<int> arrivals_;         // gradient hook calls this iteration
  at::Tensor local_used_;             // int32 bitmap, accumulated across no_sync passes
  size_t next_launch_ = 0;            // next bucket to launch
  bool finalize_queued_ = false, backward_started_ = false, launched_any_ = false;
  Clock::time_point backward_start_, last_hook_, comm_start_;
  // Gradient order prediction (§6.2.1).
  bool record_order_ = false, order_recorded_ = false, rebuild_due_ = false;
  std::vector<size_t> ready_order_;
  // static_graph: learned in the first synchronized iteration.
  bool static_learned_ = false;
  std::vector<int> expected_arrivals_;
  std::vector<size_t> static_arrival_order_;
  std::vector<size_t> static_unused_;
  int64_t iterations_ = 0;
  int64_t forwards_ = 0;      // prepare_for_backward calls, no_sync ones included
  int64_t stray_after_ = -1;  // >= 0: a backward no forward prepared ran after forward #this
  IterationStats stats_pending_, stats_;
  std::unique_ptr<detail::HookRunner> hook_runner_;  // set once, before training
  // Last member: hooks go first at destruction, before the state they use.
  std::vector<std::unique_ptr<detail::GradReadyHook>> hooks_;
};

Reducer::Reducer(std::vector<at::Tensor> params, std::vector<std::string> names,
                 ProcessGroupPtr group, ReducerOptions options)
    : impl_(std::make_unique<Impl>(std::move(params), std::move(names), std::move(group),
                                   options)) {}
Reducer::~Reducer() = default;

void Reducer::prepare_for_backward(const std::vector<at::Tensor>& outputs, bool synchronize) {
  impl_->prepare_for_backward(outputs, synchronize);
}
void Reducer::record_forward_time(double forward_ms) { impl_->record_forward_time(forward_ms); }
void Reducer::register_comm_hook(CommHook hook) { impl_->set_comm_hook(std::move(hook)); }
IterationStats Reducer::last_stats() const { return impl_->last_stats(); }
std::vector<std::vector<size_t>> Reducer::bucket_indices() const { return impl_->bucket_indices(); }
const ProcessGroupPtr& Reducer::process_group() const { return impl_->group(); }

}  // namespace ddp
