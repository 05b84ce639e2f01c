// The Reducer (paper Algorithm 1; its line numbers are cited below).
//
// An iteration is a walk through the phases of reducer/iteration.h:
// - forward (lines 8-11): prepare_for_backward() starts a synchronized
//   iteration (REDUCING) and marks the parameters the graph does not reach
//   ready at once, or, under no_sync, only accumulates (ACCUMULATING).
// - autograd_hook (lines 12-19): each gradient goes into its bucket slice
//   (contribute(): the one place that decides who averages) and the buckets
//   that became full are launched, strictly in index order.
// - the finalizing step the paper omits (after line 21; finalize.cpp): at
//   the end of backward, finalize_backward() launches what is left with zeros for the
//   missing gradients, exchanges one small status (the used-parameter
//   bitmap and what each rank did), waits, checks, and writes the averages
//   back — or raises on every rank, writing nothing.
// Two learners ride along: GradientOrder (bucket order from the first
// iteration's gradient order, §6.2.1) and StaticGraph (static_graph).
#include "base/mutex.h"
#include "reducer/reducer_impl.h"

#include "compat/torch_compat.h"
#include "reducer/copy_divided.h"
#include "reducer/unused_agreement.h"

#include <ddp/bucket.h>
#include <ddp/errors.h>

#include "agreement/model_sync.h"
#include "base/fnv1a.h"
#include "flight/recorder.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <iostream>

namespace ddp {

// Algorithm 1, lines 4-7 (DistributedDataParallel broadcasts, lines 2-3).
Reducer::Impl::Impl(std::vector<at::Tensor> params, std::vector<std::string> names,
                    ProcessGroupPtr group, ReducerOptions options,
                    const std::function<void()>& module_checks)
    : params_(std::move(params)),
      names_(std::move(names)),
      group_(std::move(group)),
      options_(options),
      debug_(detail::debug_level_from_env()),
      gradient_order_(!options_.find_unused_parameters() && !options_.layer_drop_hints()),
      agreement_(group_ ? group_->rank() : 0, group_ ? group_->size() : 1,
                 group_ ? group_->backend_name() : std::string()) {
  if (!group_) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "Reducer", {}}, "no process group given");
  }
  // One agreement on set-up errors: the module's, when it builds this
  // Reducer, then the Reducer's own.
  detail::check_on_every_rank(*group_, module_checks ? "DistributedDataParallel" : "a Reducer",
                              [&] {
                                if (module_checks) module_checks();
                                check_arguments();
                              });
  detail::verify_same_tensors(*group_, params_, names_, "parameters");
  check_same_collective_options();
  check_autotune_options();  // the same on every rank by now
  if (params_.empty()) {
    throw InvalidArgument(group_->error_context(),
                          "the model has no parameter that requires grad: there is "
                          "nothing to synchronize (check requires_grad and "
                          "parameters_to_ignore)");
  }
  const size_t n = params_.size();
  for (const auto& p : params_) dtypes_.push_back(p.scalar_type());
  local_used_ = at::zeros({static_cast<int64_t>(n)}, at::kInt);
  build_buckets(reverse_order(n), options_.bucket_cap_bytes());
  MutexLock lock(mutex_);
  hook_gradients();
}

std::vector<at::Tensor> Reducer::Impl::as_constructed() const {
  std::vector<at::Tensor> out;
  out.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i];
    if (p.scalar_type() == dtypes_[i]) {
      out.push_back(p);
    } else {  // lowered: one element of its own dtype, seen at the parameter's shape
      out.push_back(at::empty({}, p.options().dtype(dtypes_[i])).expand(p.sizes()));
    }
  }
  return out;
}

// A hook on each parameter's gradient accumulator: autograd_hook(i).
void Reducer::Impl::hook_gradients() {
  hooks_.clear();
  for (size_t i = 0; i < params_.size(); ++i) {
    hooks_.push_back(std::make_unique<GradReadyHook>(params_[i], [this, i] { autograd_hook(i); }));
  }
}

void Reducer::Impl::parameters_replaced() {
  MutexLock lock(mutex_);
  if (it_.phase == Phase::FINALIZING) {
    throw InvalidArgument(group_->error_context("Reducer::parameters_replaced"),
                          "called during a backward pass; call it between iterations");
  }
  hook_gradients();
}

// What this rank can tell wrong on its own (the constructor makes every
// rank raise if one does).
void Reducer::Impl::check_arguments() const {
  if (names_.size() != params_.size()) {
    throw InvalidArgument(group_->error_context("Reducer"),
                          std::to_string(params_.size()) + " parameters but " +
                              std::to_string(names_.size()) + " names");
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].requires_grad()) {
      throw InvalidArgument(group_->error_context("Reducer"),
                            "parameter #" + std::to_string(i) + " '" + names_[i] +
                                "' does not require grad; leave it out");
    }
  }
  if (options_.skip_all_reduce_unused_params() &&
      (!options_.find_unused_parameters() || options_.layer_drop_hints())) {
    throw InvalidArgument(group_->error_context("Reducer"),
                          options_.layer_drop_hints()
                              ? "skip_all_reduce_unused_params and layer_drop_hints together: "
                                "both leave parameters out of their buckets; choose one"
                              : "skip_all_reduce_unused_params needs find_unused_parameters(true): "
                                "the parameters it skips are those the graph walk does not reach");
  }
  if (options_.static_graph() && options_.layer_drop_hints()) {
    throw InvalidArgument(
        group_->error_context("Reducer"),
        "static_graph and layer_drop_hints together: static_graph declares "
        "that the same parameters get gradients every iteration, hints that they change; "
        "choose one");
  }
  for (int64_t cap : options_.bucket_caps_bytes()) {
    if (cap < 0) {
      throw InvalidArgument(group_->error_context("ReducerOptions"),
                            "bucket_caps_bytes must be >= 0 each, got " + std::to_string(cap));
    }
  }
  if (const auto dtype = options_.reduce_dtype(); dtype && !at::isFloatingType(*dtype)) {
    throw InvalidArgument(group_->error_context("ReducerOptions"),
                          std::string("reduce_dtype must be a floating-point dtype, got ") +
                              c10::toString(*dtype));
  }
  if (!options_.bucket_caps_bytes().empty() && autotuning()) {
    throw InvalidArgument(group_->error_context("ReducerOptions"),
                          "bucket_caps_bytes and autotune_caps_bytes together: per-bucket caps "
                          "fix the buckets that autotuning would choose; use one");
  }
}

// Options whose disagreement would make ranks issue different collectives
// rather than fail at once: zero-copy buckets are allocated collectively
// (bucket_set.cpp), autotuning adds an allreduce to its trial iterations,
// layer-drop hints one to every iteration, and bucket sizes decide every
// bucket's allreduce. Every rank has the
// same, or all raise here.
void Reducer::Impl::check_same_collective_options() {
  const bool mine[] = {options_.zero_copy_buckets(), autotuning(), options_.layer_drop_hints(),
                       options_.skip_all_reduce_unused_params()};
  at::Tensor votes = at::tensor(
      {mine[0] ? 1 : 0, mine[1] ? 1 : 0, mine[2] ? 1 : 0, mine[3] ? 1 : 0}, at::kInt);
  group_->allreduce(votes)->wait();
  const ErrorContext context = group_->error_context();
  const std::string fix =
      "; give every rank the same DistributedDataParallelOptions (and $DDP_BUCKET_CAP_MB)";
  const char* what[] = {"zero_copy_buckets", "bucket autotuning (bucket_cap_mb \"auto\")",
                        "layer_drop_hints", "skip_all_reduce_unused_params"};
  for (int k = 0; k < 4; ++k) {
    const int yes = votes.data_ptr<int>()[k];
    if (yes == 0 || yes == group_->size()) continue;
    throw InvalidArgument(context, what[k] + std::string(" is ") + (mine[k] ? "on" : "off") +
                                       " here but on for " + std::to_string(yes) + " of " +
                                       std::to_string(group_->size()) + " ranks" + fix);
  }
  // The bucket sizes' fingerprint (< 2^20, exact in a double): its largest
  // and smallest value across ranks are equal when every rank's is.
  detail::Fnv1a hash;
  hash.add(options_.bucket_cap_bytes()).add(options_.first_bucket_cap_bytes());
  for (int64_t cap : options_.bucket_caps_bytes()) hash.add(cap);
  for (int64_t cap : options_.autotune_caps_bytes()) hash.add(cap);
  hash.add(options_.autotune_iterations());
  hash.add(int64_t{options_.reduce_dtype() ? static_cast<int>(*options_.reduce_dtype()) : -1});
  const double fingerprint = static_cast<double>(hash.value() >> 44);
  at::Tensor range = at::tensor({fingerprint, -fingerprint}, at::kDouble);
  group_->allreduce(range, ReduceOp::MAX)->wait();
  if (range.data_ptr<double>()[0] != -range.data_ptr<double>()[1]) {
    throw InvalidArgument(
        context, "the bucket sizes or reduce_dtype differ across ranks (here bucket_cap " +
                     std::to_string(options_.bucket_cap_bytes()) + " bytes, first bucket " +
                     std::to_string(options_.first_bucket_cap_bytes()) + " bytes, " +
                     std::to_string(options_.bucket_caps_bytes().size()) + " per-bucket caps, " +
                     std::to_string(options_.autotune_caps_bytes().size()) +
                     " sizes to autotune in " + std::to_string(options_.autotune_iterations()) +
                     " iterations, reduce_dtype " +
                     (options_.reduce_dtype() ? c10::toString(*options_.reduce_dtype())
                                              : "the parameters'") +
                     ")" + fix);
  }
}

Reducer::Impl::~Impl() {
  // No lock: nothing else runs during destruction.
  const int64_t stray = agreement_.unreported_stray();
  if (stray >= 0) {  // no later iteration reported it to the other ranks
    std::cerr << "ddp: rank " << group_->rank() << ": warning: a backward() that no DDP "
              << "forward prepared ran after forward pass #" << stray
              << " (backward() twice after one forward?); its gradients were not averaged, "
              << "so this replica differs from the others" << std::endl;
  }
}

// Algorithm 1, lines 8-11, after the wrapped forward ran.
void Reducer::Impl::prepare_for_backward(const std::vector<at::Tensor>& outputs, bool synchronize) {
  MutexLock lock(mutex_);
  if (synchronize || !uneven_inputs_) agreement_.count_forward();
  if (options_.layer_drop_hints()) layer_drop_.begin_pass();
  if (!synchronize) {
    it_.phase = Phase::ACCUMULATING;
    return;
  }
  begin_synchronized_iteration(/*joined=*/false);
  watch_outputs(outputs);
}

// Join, a model with collectives of its own: this rank replays a forward
// and backward on an empty batch so that it issues them in the others'
// order; what its backward produces, and what no_sync passes accumulated
// here, is not contributed (zeros, an empty used bitmap, status joined).
void Reducer::Impl::prepare_for_shadow_backward(const std::vector<at::Tensor>& outputs) {
  MutexLock lock(mutex_);
  begin_synchronized_iteration(/*joined=*/true);
  watch_outputs(outputs);
}

void Reducer::Impl::watch_outputs(const std::vector<at::Tensor>& outputs) {
  for (const auto& out : outputs) {
    detail::at_backward_start(out, [this, token = std::weak_ptr<int>(alive_)] {
      if (token.lock()) on_backward_start();
    });
  }
  // Line 10: parameters the graph does not reach are ready now.
  if (options_.find_unused_parameters()) {
    auto reached = detail::reachable_nodes(outputs);
    std::vector<bool> unused(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      unused[i] = !it_.ready[i] && !reached.count(hooks_[i]->accumulator());  // not hinted
    }
    leave_out_unused(unused);
  } else if (options_.static_graph() && static_graph_.learned()) {
    for (size_t i : static_graph_.unused()) mark_ready_without_gradient(i);
  }
}

void Reducer::Impl::set_divisor(int64_t ranks) {
  MutexLock lock(mutex_);
  if (ranks < 1 || ranks > group_->size()) {
    throw InvalidArgument(
        group_->error_context("Reducer::set_divisor(" + std::to_string(ranks) + ")"),
        "must be in [1, " + std::to_string(group_->size()) + "]");
  }
  if (hook_runner_ && ranks != group_->size()) {
    throw InvalidArgument(group_->error_context(),
                          "gradients cannot be divided by " + std::to_string(ranks) +
                              " ranks with a communication hook: the hook averages over the whole "
                              "group (use Join's divide_by_initial_world_size(true))");
  }
  divisor_.fill_(static_cast<double>(ranks));
}

void Reducer::Impl::set_uneven_inputs(bool uneven) {
  MutexLock lock(mutex_);
  uneven_inputs_ = uneven;
}

bool Reducer::Impl::has_comm_hook() const {
  MutexLock lock(mutex_);
  return hook_runner_ != nullptr;
}

void Reducer::Impl::set_comm_hook(CommHook hook, HookStateIO state) {
  MutexLock lock(mutex_);
  const ErrorContext context = group_->error_context("register_comm_hook");
  if (!hook) throw InvalidArgument(context, "the hook is empty");
  if (hook_runner_) throw InvalidArgument(context, "a hook is already registered; register once");
  if (divisor_.item<double>() != group_->size()) {
    throw InvalidArgument(context,
                          "gradients are divided by " + std::to_string(divisor_.item<double>()) +
                              " ranks (Join's divide_by_initial_world_size(false)); a hook "
                              "averages over the whole group");
  }
  if (iterations_ > 0 || it_.phase != Phase::IDLE) {
    throw InvalidArgument(context,
                          "training has started; register the hook before the first "
                          "forward/backward");
  }
  hook_runner_ = std::make_unique<detail::HookRunner>(std::move(hook));
  hook_state_ = std::move(state);
}

std::optional<HookStateDict> Reducer::Impl::hook_state() const {
  MutexLock lock(mutex_);
  if (!hook_state_.save) return std::nullopt;
  return hook_state_.save();
}

void Reducer::Impl::load_hook_state(const HookStateDict& dict) {
  MutexLock lock(mutex_);
  if (hook_state_.load) hook_state_.load(dict);
}

Reducer::BucketLayout Reducer::Impl::bucket_layout() const {
  MutexLock lock(mutex_);
  Reducer::BucketLayout out;
  out.order.assign(bucket_sequence_.begin(), bucket_sequence_.end());
  out.cap_bytes = bucket_cap_;
  out.rebuilds = layout_;
  return out;
}

bool Reducer::Impl::restore_bucket_layout(const Reducer::BucketLayout& layout) {
  MutexLock lock(mutex_);
  std::vector<bool> seen(params_.size());
  bool permutation = layout.order.size() == params_.size();
  for (int64_t i : layout.order) {
    permutation = permutation && i >= 0 && static_cast<size_t>(i) < seen.size() && !seen[i];
    if (permutation) seen[i] = true;
  }
  if (!permutation || layout.cap_bytes < 0 || layout.rebuilds < 0) {
    throw InvalidArgument(group_->error_context("restore_bucket_layout"),
                          "the saved bucket layout does not fit this model's " +
                              std::to_string(params_.size()) +
                              " synchronized parameters (saved from another model?)");
  }
  if (iterations_ > 0 || it_.phase != Phase::IDLE) return false;
  build_buckets(std::vector<size_t>(layout.order.begin(), layout.order.end()), layout.cap_bytes);
  layout_ = layout.rebuilds;
  gradient_order_.settle();
  return true;
}

void Reducer::Impl::hint_unused(const std::vector<at::Tensor>& params) {
  MutexLock lock(mutex_);
  if (!options_.layer_drop_hints()) {
    throw InvalidArgument(group_->error_context(),
                          "hint_unused_parameters needs layer_drop_hints(true) in the options "
                          "every rank constructs DistributedDataParallel (or the Reducer) with");
  }
  layer_drop_.hint_next(params, names_, *group_);
}

void Reducer::Impl::record_forward_time(double forward_ms) {
  MutexLock lock(mutex_);
  stats_pending_.forward_ms = forward_ms;
}

IterationStats Reducer::Impl::stats() const {
  MutexLock lock(mutex_);
  return stats_;
}

std::vector<std::vector<size_t>> Reducer::Impl::bucket_indices() const {
  MutexLock lock(mutex_);
  std::vector<std::vector<size_t>> out;
  for (const auto& b : buckets_.all()) out.push_back(b.params);
  return out;
}

// Every synchronized iteration, real or shadowed (Join), begins alike, so
// that a rank that joins keeps the others' collectives.
void Reducer::Impl::begin_synchronized_iteration(bool joined) {
  stats_pending_ = IterationStats{};
  std::vector<size_t> sequence = bucket_sequence_;
  bool rebuild = false;
  if (gradient_order_.rebuild_due()) {
    sequence = gradient_order_.take_rank0_order(*group_);
    rebuild = true;
  }
  int64_t cap = bucket_cap_;
  if (autotuning()) cap = next_bucket_cap(sequence);
  last_ended_ = false;  // until this iteration's checks pass (a rebuild may throw first)
  if (rebuild || cap != bucket_cap_) {
    buckets_.begin_iteration(*group_);  // nothing of the old buckets in flight
    build_buckets(std::move(sequence), cap);
    stats_pending_.buckets_rebuilt = true;
  }
  if (autotuning()) record_bucket_tuning();
  last_begin_ = Clock::now();
  buckets_.begin_iteration(*group_);
  if (options_.layer_drop_hints()) {
    try {
      layer_drop_.agree(*group_, joined, names_);
    } catch (...) {
      // This iteration never began; what its passes left is dropped with
      // it, so that the next one starts clean.
      it_.phase = Phase::IDLE;
      layer_drop_.take_violations();
      local_used_.zero_();
      throw;
    }
  }
  gradient_order_.begin_iteration();
  it_.begin_reducing(params_.size());
  it_.joined = joined;
  if (joined) local_used_.zero_();  // what no_sync passes accumulated here is not contributed
  if (options_.layer_drop_hints()) leave_out_dropped();
  // skip_all_reduce_unused_params: the whole layout again, in case the walk
  // packs nothing out (a Join's shadow iteration walks no forward at all).
  if (options_.skip_all_reduce_unused_params() && packs()) {
    pack_out(std::vector<bool>(params_.size()));
  }
}

void Reducer::Impl::pack_out(const std::vector<bool>& out) {
  buckets_.pack(out);
  for (size_t i = 0; i < params_.size(); ++i) {
    // A gradient an earlier write-back left in this buffer may lie where
    // another parameter's slice now is: it gets its own memory first.
    at::Tensor& grad = params_[i].mutable_grad();
    if (grad.defined() && buckets_.in_buffer(i, grad)) grad = grad.clone();
    if (out[i]) it_.ready[i] = true;
  }
}

void Reducer::Impl::leave_out_unused(const std::vector<bool>& unused) {
  std::vector<bool> out(params_.size());
  if (skips_unused()) {
    for (size_t i = 0; i < params_.size(); ++i) {
      out[i] = unused[i] && local_used_.data_ptr<int32_t>()[i] == 0;  // nothing accumulated
    }
    if (debug_ == detail::DebugLevel::DETAIL) {
      detail::check_same_unused(*group_, out, names_);
    }
    stats_pending_.skipped_parameters = std::count(out.begin(), out.end(), true);
  }
  if (skips_unused()) pack_out(out);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (unused[i] && !out[i]) mark_ready_without_gradient(i);
  }
}

void Reducer::Impl::leave_out_dropped() {
  const std::vector<bool>& dropped = layer_drop_.dropped();
  stats_pending_.dropped_parameters = std::count(dropped.begin(), dropped.end(), true);
  if (packs()) pack_out(dropped);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (it_.ready[i]) continue;
    // Sent as zeros (not packed), or hinted by this pass only: what no_sync
    // passes accumulated goes in now.
    if (dropped[i] || (!it_.joined && layer_drop_.hinted_in_pass(i))) {
      mark_ready_without_gradient(i);
    }
  }
}

std::vector<int64_t> Reducer::Impl::bucket_caps(int64_t cap) const {
  if (!options_.bucket_caps_bytes().empty()) return options_.bucket_caps_bytes();
  return {options_.first_bucket_cap_bytes(), cap};
}

// Line 4.
void Reducer::Impl::build_buckets(std::vector<size_t> sequence, int64_t cap) {
  buckets_ = detail::BucketSet(
      params_, assign_buckets(as_constructed(), sequence, bucket_caps(cap)),
      options_.gradient_as_bucket_view(), options_.zero_copy_buckets() ? group_.get() : nullptr,
      options_.reduce_dtype());
  bucket_sequence_ = std::move(sequence);
  bucket_cap_ = cap;
  ++layout_;
}

// Backward reached a forward output: the outermost backward pass has
// started, so the end-of-backward callback goes to it (a gradient hook may
// first fire inside a reentrant backward, e.g. checkpointing).
void Reducer::Impl::on_backward_start() {
  MutexLock lock(mutex_);
  if (it_.phase != Phase::REDUCING) return;
  if (!it_.backward_start) it_.backward_start = Clock::now();
  queue_finalize();
}

void Reducer::Impl::queue_finalize() {
  if (it_.finalize_queued) return;
  it_.finalize_queued = true;
  detail::at_end_of_backward([this] { finalize_backward(); });
}

// Algorithm 1, lines 12-19: parameter i's gradient was accumulated.
void Reducer::Impl::autograd_hook(size_t i) {
  MutexLock lock(mutex_);
  if (it_.phase == Phase::IDLE) {  // not reduced: reported to every rank in the next status
    agreement_.note_stray_backward();
    return;
  }
  if (options_.layer_drop_hints()) {
    // A joined rank's replay (Join's shadow batch) runs the whole model:
    // what the others left out is not its to send. Elsewhere a hinted
    // parameter's gradient is not reduced but reported in the next status.
    if (it_.joined ? layer_drop_.dropped()[i] : layer_drop_.got_gradient(i)) return;
  }
  if (!it_.joined) local_used_.data_ptr<int32_t>()[i] = 1;
  if (it_.phase == Phase::ACCUMULATING) return;
  it_.last_hook = Clock::now();
  if (!it_.backward_start) it_.backward_start = it_.last_hook;  // no output on the path
  queue_finalize();
  const int arrivals = ++it_.arrivals[i];
  if (options_.static_graph()) {
    if (!static_graph_.learned()) return static_graph_.observe(i, arrivals);
    if (!static_graph_.complete(i, arrivals, names_[i], *group_)) return;
  } else if (it_.ready[i]) {
    throw InvalidArgument(
        group_->error_context(),
        "parameter #" + std::to_string(i) + " '" + names_[i] +
            "' got its gradient twice in one backward pass (reentrant "
            "backward or activation checkpointing). Construct DistributedDataParallel with "
            "static_graph(true) so that the arrivals are counted.");
  }
  mark_ready(i);
}

// Lines 13-16: the gradient goes into its slice of the bucket.
void Reducer::Impl::mark_ready(size_t i) {
  at::NoGradGuard no_grad;
  at::Tensor& grad = params_[i].mutable_grad();
  if (grad.defined() && !it_.joined) {
    fill_slot(i, grad);  // before grad changes
    const at::Tensor& view = buckets_.view(i);
    if (options_.gradient_as_bucket_view() && grad.scalar_type() == view.scalar_type()) grad = view;
  } else {
    detach_grad_from_bucket(i);
    fill_slot(i, {});
  }
  gradient_order_.note_ready(i);
  set_ready(i);
}

// Ready without a gradient this pass: contributes what no_sync passes
// accumulated, else zeros. A gradient that is a bucket view is detached
// first, so that a globally unused parameter keeps it untouched.
void Reducer::Impl::mark_ready_without_gradient(size_t i) {
  at::NoGradGuard no_grad;
  const bool accumulated = local_used_.data_ptr<int32_t>()[i] != 0 && params_[i].grad().defined();
  detach_grad_from_bucket(i);
  fill_slot(i, accumulated ? params_[i].grad() : at::Tensor());
  set_ready(i);
}

// Parameter i's slice gets `grad` (undefined: zeros): now, through the copy
// stream of its device (copy_streams.h), or with a communication hook right
// here (the hook's thread reads buckets in its own stream order); with
// batched_grad_copy when the whole bucket is (fill_staged).
void Reducer::Impl::fill_slot(size_t i, const at::Tensor& grad) {
  at::Tensor& view = buckets_.view(i);
  if (options_.batched_grad_copy()) {
    detail::Bucket& b = buckets_.of(i);
    b.staged_views.push_back(view);
    b.staged_grads.push_back(grad);
    return;
  }
  ++stats_pending_.bucket_fill_ops;
  auto write = [&]() DDP_REQUIRES(mutex_) {
    if (grad.defined()) {
      contribute(view, grad);
    } else {
      view.zero_();
    }
  };
  if (hook_runner_) return write();
  copy_streams_.write(view, {grad}, write);
}

// The one place that decides who averages. Without a hook the bucket
// holds gradient / divisor (the world size, or under Join the ranks still
// training: set_divisor), so the allreduce's sum is the average; a hook
// gets the plain gradients and averages itself (comm_hook.h).
void Reducer::Impl::contribute(at::Tensor& view, const at::Tensor& grad) {
  const bool in_place = grad.data_ptr() == view.data_ptr();  // gradient_as_bucket_view
  if (hook_runner_) {
    if (!in_place) view.copy_(grad);
  } else if (in_place || grad.scalar_type() != view.scalar_type()) {
    if (!in_place) view.copy_(grad);  // cast to reduce_dtype, then averaged there
    view.div_(divisor_);
  } else {
    detail::copy_divided(view, grad, divisor_);  // copy and average in one pass
  }
}

// batched_grad_copy: bucket b's staged gradients copied in one batched call,
// the slices without one zeroed in another, and the bucket divided once
// (contribute's averaging, for the whole bucket): the same values as
// contribute() gives slice by slice.
void Reducer::Impl::fill_staged(detail::Bucket& b) {
  std::vector<at::Tensor> to, from, zeros;
  for (size_t k = 0; k < b.staged_views.size(); ++k) {
    const at::Tensor& grad = b.staged_grads[k];
    if (!grad.defined()) {
      zeros.push_back(b.staged_views[k]);
    } else if (grad.data_ptr() != b.staged_views[k].data_ptr()) {  // else gradient_as_bucket_view
      to.push_back(b.staged_views[k]);
      from.push_back(grad);
    }
  }
  auto write = [&]() DDP_REQUIRES(mutex_) {
    if (!to.empty()) compat::copy_all(to, from);
    if (!zeros.empty()) compat::zero_all(zeros);
    if (!hook_runner_) b.sent().div_(divisor_);
  };
  stats_pending_.bucket_fill_ops += !to.empty() + !zeros.empty() + !hook_runner_;
  b.staged_views.clear();
  b.staged_grads.clear();
  if (hook_runner_) return write();
  copy_streams_.write(b.flat, from, write);
}

// Lines 17-19: a full bucket launches, with every full one after it.
void Reducer::Impl::set_ready(size_t i) {
  it_.ready[i] = true;
  if (--buckets_.of(i).pending == 0 && options_.overlap_communication()) {
    launch_ready_buckets();
  }
}

void Reducer::Impl::launch_ready_buckets() {
  while (it_.next_launch < buckets_.size() && buckets_[it_.next_launch].pending == 0) {
    const size_t k = it_.next_launch++;
    detail::Bucket& b = buckets_[k];
    if (options_.batched_grad_copy()) fill_staged(b);
    b.launched = Clock::now();
    if (!it_.comm_start) it_.comm_start = b.launched;
    if (hook_runner_) {
      std::vector<at::Tensor> params;
      for (size_t i : b.params) params.push_back(params_[i]);
      b.future = hook_runner_->submit(
          GradBucket(k, k + 1 == buckets_.size(), b.flat, std::move(params), layout_));
    } else {
      if (b.live_numel == 0) continue;  // every member hinted unused: nothing to send
      const at::Tensor sent = b.sent();
      copy_streams_.launch(sent, [&] {
        detail::flight::BucketScope in_bucket(static_cast<int>(k));
        b.work = group_->allreduce(sent);
      });
    }
  }
}

Reducer::Reducer(std::vector<at::Tensor> params, std::vector<std::string> names,
                 ProcessGroupPtr group, ReducerOptions options)
    : impl_(
          std::make_unique<Impl>(std::move(params), std::move(names), std::move(group), options)) {}
Reducer::Reducer(std::vector<at::Tensor> params, std::vector<std::string> names,
                 ProcessGroupPtr group, ReducerOptions options, std::function<void()> module_checks)
    : impl_(std::make_unique<Impl>(std::move(params), std::move(names), std::move(group), options,
                                   module_checks)) {}
Reducer::~Reducer() = default;

void Reducer::prepare_for_backward(const std::vector<at::Tensor>& outputs, bool synchronize) {
  impl_->prepare_for_backward(outputs, synchronize);
}
void Reducer::record_forward_time(double forward_ms) { impl_->record_forward_time(forward_ms); }
void Reducer::parameters_replaced() { impl_->parameters_replaced(); }
void Reducer::at_end_of_synchronized_backward(std::function<bool()> callback) {
  impl_->at_end_of_synchronized_backward(std::move(callback));
}
void Reducer::register_comm_hook(CommHook hook, HookStateIO state) {
  impl_->set_comm_hook(std::move(hook), std::move(state));
}
std::optional<HookStateDict> Reducer::hook_state() const { return impl_->hook_state(); }
void Reducer::load_hook_state(const HookStateDict& dict) { impl_->load_hook_state(dict); }
Reducer::BucketLayout Reducer::bucket_layout() const { return impl_->bucket_layout(); }
bool Reducer::restore_bucket_layout(const BucketLayout& layout) {
  return impl_->restore_bucket_layout(layout);
}
void Reducer::hint_unused(const std::vector<at::Tensor>& params) { impl_->hint_unused(params); }
bool Reducer::has_comm_hook() const { return impl_->has_comm_hook(); }
void Reducer::shadow_iteration() { impl_->shadow_iteration(); }

void Reducer::prepare_for_shadow_backward(const std::vector<at::Tensor>& outputs) {
  impl_->prepare_for_shadow_backward(outputs);
}
void Reducer::set_divisor(int64_t ranks) { impl_->set_divisor(ranks); }
void Reducer::set_uneven_inputs(bool uneven) { impl_->set_uneven_inputs(uneven); }
IterationStats Reducer::stats() const { return impl_->stats(); }
std::vector<std::vector<size_t>> Reducer::bucket_indices() const { return impl_->bucket_indices(); }
const ProcessGroupPtr& Reducer::process_group() const { return impl_->group(); }

}  // namespace ddp
