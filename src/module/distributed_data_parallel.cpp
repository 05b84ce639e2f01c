#include <ddp/distributed_data_parallel.h>

#include <ddp/errors.h>
#include <ddp/init.h>

#include "agreement/model_sync.h"
#include "base/env.h"
#include "module/mixed_precision.h"
#include "module/module_timeline.h"
#include "reducer/autograd_hooks.h"
#include "rendezvous/default_group.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <exception>
#include <set>

namespace ddp {
namespace {

constexpr const char* kModuleName = "module";

int64_t mib_to_bytes(double mib, const char* option) {
  if (mib < 0) {
    throw InvalidArgument(std::string("DistributedDataParallelOptions::") + option +
                          " must be >= 0, got " + std::to_string(mib));
  }
  return static_cast<int64_t>(mib * 1024 * 1024);
}

// bucket_cap_mb "auto" tries the sizes of the paper's §5.3 sweep.
constexpr double kAutotuneMib[] = {1, 2, 5, 10, 25, 50, 100};

ReducerOptions bucket_options(const BucketCapMb& cap, double first_cap_mb,
                              const std::vector<double>& cap_list_mb) {
  ReducerOptions out;
  out.bucket_cap_bytes(mib_to_bytes(cap.mib(), "bucket_cap_mb"))
      .first_bucket_cap_bytes(mib_to_bytes(first_cap_mb, "first_bucket_cap_mb"));
  if (!cap_list_mb.empty()) {
    if (cap.is_auto()) {
      throw InvalidArgument(
          "DistributedDataParallelOptions::bucket_cap_mb_list with bucket_cap_mb(\"auto\"): "
          "the list fixes the buckets that auto would choose; use one");
    }
    std::vector<int64_t> caps;
    for (double mib : cap_list_mb) caps.push_back(mib_to_bytes(mib, "bucket_cap_mb_list"));
    out.bucket_caps_bytes(caps);
    return out;
  }
  if (cap.is_auto()) {
    std::vector<int64_t> caps;
    for (double mib : kAutotuneMib) caps.push_back(mib_to_bytes(mib, "bucket_cap_mb"));
    out.autotune_caps_bytes(caps);
  }
  return out;
}

// What the Reducer is told of the module's options: the one place they meet.
// mixed_precision's dtypes: floating-point ones.
void check_mixed_precision(const std::optional<MixedPrecision>& mp) {
  if (!mp) return;
  const std::pair<const char*, std::optional<at::ScalarType>> fields[] = {
      {"param_dtype", mp->param_dtype},
      {"reduce_dtype", mp->reduce_dtype},
      {"buffer_dtype", mp->buffer_dtype}};
  for (const auto& [name, dtype] : fields) {
    if (dtype && !at::isFloatingType(*dtype)) {
      throw InvalidArgument(std::string("DistributedDataParallelOptions::mixed_precision: ") +
                            name + " must be a floating-point dtype, got " +
                            c10::toString(*dtype));
    }
  }
}

// The buckets' dtype: mixed_precision's reduce_dtype, else its param_dtype.
std::optional<at::ScalarType> reduce_dtype_of(const std::optional<MixedPrecision>& mp) {
  if (!mp) return std::nullopt;
  return mp->reduce_dtype ? mp->reduce_dtype : mp->param_dtype;
}

ReducerOptions reducer_options_for(const DistributedDataParallelOptions& o) {
  check_mixed_precision(o.mixed_precision());
  return bucket_options(o.bucket_cap_mb(), o.first_bucket_cap_mb(), o.bucket_cap_mb_list())
      .reduce_dtype(reduce_dtype_of(o.mixed_precision()))
      .find_unused_parameters(o.find_unused_parameters())
      .skip_all_reduce_unused_params(o.skip_all_reduce_unused_params())
      .gradient_as_bucket_view(o.gradient_as_bucket_view())
      .batched_grad_copy(o.batched_grad_copy())
      .static_graph(o.static_graph())
      .overlap_communication(o.overlap_communication())
      .zero_copy_buckets(o.zero_copy_buckets())
      .layer_drop_hints(o.layer_drop_hints());
}

}  // namespace

NoSyncGuard::NoSyncGuard(DistributedDataParallelImpl& ddp)
    : ddp_(ddp), previous_(ddp.require_backward_grad_sync_) {
  ddp_.require_backward_grad_sync_ = false;
}

NoSyncGuard::~NoSyncGuard() { ddp_.require_backward_grad_sync_ = previous_; }

void DistributedDataParallelImpl::initialize(DistributedDataParallelOptions options) {
  options_ = std::move(options);
  group_ = detail::group_or_default(options_.process_group());
  const auto& wrapped = wrapped_;
  register_module(kModuleName, wrapped);

  // What this rank can tell wrong on its own comes first; the Reducer then
  // lets every rank learn whether one could, with its own checks, in one
  // round (a rank that stopped here would leave the others waiting in the
  // Reducer's collectives), and checks the parameters across ranks.
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  std::shared_ptr<detail::RankTimeline> rank_timeline;
  ReducerOptions reducer_options;
  std::exception_ptr local_error;
  try {
    synchronized_parameters(params, names);
    rank_timeline = detail::RankTimeline::open_from_env(group_->rank());
    options_.bucket_cap_mb(options_.bucket_cap_mb().resolved());
    reducer_options = reducer_options_for(options_);
  } catch (...) {
    local_error = std::current_exception();
  }
  for (const auto& b : wrapped->buffers()) buffers_.push_back(b);

  reducer_.reset(new Reducer(params, names, group_, reducer_options, [local_error] {
    if (local_error) std::rethrow_exception(local_error);
  }));
  if (rank_timeline) {
    timeline_ = std::make_shared<detail::ModuleTimeline>(std::move(rank_timeline), *reducer_);
  }
  if (!options_.init_sync() && detail::debug_level_from_env() == detail::DebugLevel::DETAIL) {
    verify_same_model(*wrapped, group_);
  }
  if (options_.init_sync()) {
    std::vector<torch::Tensor> all_params;
    for (const auto& p : wrapped->parameters()) all_params.push_back(p);
    std::vector<std::string> buffer_names;
    for (const auto& item : wrapped->named_buffers()) buffer_names.push_back(item.key());
    detail::verify_same_tensors(*group_, buffers_, buffer_names, "buffers");
    all_params.insert(all_params.end(), buffers_.begin(), buffers_.end());
    detail::broadcast_coalesced(*group_, all_params, 0);
  }
  set_up_mixed_precision();
}

// After the broadcast, as PyTorch: buffers cast once; the parameters (all
// floating-point ones but the ignored) lowered before each forward.
void DistributedDataParallelImpl::set_up_mixed_precision() {
  const auto& mp = options_.mixed_precision();
  if (!mp) return;
  if (mp->buffer_dtype) {
    torch::NoGradGuard no_grad;
    for (auto& b : buffers_) {
      if (b.is_floating_point()) b.set_data(b.to(*mp->buffer_dtype));
    }
  }
  if (!mp->param_dtype) return;
  std::vector<torch::Tensor> lowered;
  std::vector<std::string> names;
  std::set<const void*> seen;  // a tied parameter is listed under each name
  const std::set<std::string> ignored = ignored_parameter_names();
  for (const auto& item : wrapped_->named_parameters()) {
    if (!ignored.count(item.key()) && item.value().is_floating_point() &&
        seen.insert(item.value().unsafeGetTensorImpl()).second) {
      lowered.push_back(item.value());
      names.push_back(item.key());
    }
  }
  low_precision_ = std::make_shared<detail::LowPrecisionParams>(lowered, names,
                                                                *mp->param_dtype, group_);
  reducer_->at_end_of_synchronized_backward([this] { return restore_parameters(); });
}

void DistributedDataParallelImpl::refuse_zero_overlap() const {
  if (!low_precision_) return;
  throw InvalidArgument(group_->error_context("register_comm_hook"),
                        "zero_hook (ZeroOptions::overlap_with_ddp) steps the parameters during "
                        "backward, while mixed_precision holds them in param_dtype; use one: "
                        "ZeRO without overlap_with_ddp steps them after backward");
}

torch::Tensor DistributedDataParallelImpl::cast_tensor_input(const torch::Tensor& t) const {
  if (!low_precision_ || !t.defined() || !t.is_floating_point()) return t;
  return t.to(*options_.mixed_precision()->param_dtype);
}

// mixed_precision: the parameters lowered before a forward; their own data
// back when the backward that follows it ends: a synchronized one through
// the Reducer (after it wrote the averages, even when it raised), a no_sync
// one through an end-of-backward callback of its own; at once after a
// forward no backward can follow, or one that raised; and when the module
// goes.
void DistributedDataParallelImpl::lower_parameters() {
  if (low_precision_ && low_precision_->lower()) reducer_->parameters_replaced();
}

bool DistributedDataParallelImpl::restore_parameters() {
  awaiting_backward_ = false;
  return low_precision_->restore();
}

void DistributedDataParallelImpl::restore_parameters_after(
    const std::vector<torch::Tensor>& outputs) {
  if (!low_precision_) return;
  if (!at::GradMode::is_enabled()) {
    restore_unless_awaiting_backward();
    return;
  }
  awaiting_backward_ = true;
  if (require_backward_grad_sync_) return;  // the Reducer's end of backward restores
  std::weak_ptr<detail::LowPrecisionParams> alive = low_precision_;
  for (const auto& out : outputs) {
    detail::at_backward_start(out, [this, alive] {
      detail::at_end_of_backward([this, alive] {
        if (alive.lock() && restore_parameters()) reducer_->parameters_replaced();
      });
    });
  }
}

// After a forward no backward follows (no grad, or it threw): back at once,
// unless an earlier forward's backward is still to come.
void DistributedDataParallelImpl::restore_unless_awaiting_backward() {
  if (low_precision_ && !awaiting_backward_ && low_precision_->restore()) {
    reducer_->parameters_replaced();
  }
}

DistributedDataParallelImpl::~DistributedDataParallelImpl() {
  if (low_precision_) low_precision_->restore();  // the module keeps its own values
}

void verify_same_model(const torch::nn::Module& module, ProcessGroupPtr group) {
  if (!group) group = default_process_group();
  std::vector<torch::Tensor> params, buffers;
  std::vector<std::string> param_names, buffer_names;
  for (const auto& item : module.named_parameters()) {
    params.push_back(item.value());
    param_names.push_back(item.key());
  }
  for (const auto& item : module.named_buffers()) {
    buffers.push_back(item.value());
    buffer_names.push_back(item.key());
  }
  detail::verify_same_tensors(*group, params, param_names, "parameters");
  detail::verify_same_tensors(*group, buffers, buffer_names, "buffers");
  params.insert(params.end(), buffers.begin(), buffers.end());
  param_names.insert(param_names.end(), buffer_names.begin(), buffer_names.end());
  detail::verify_same_values(*group, params, param_names, "parameters and buffers");
}

// Those requiring grad, minus the ignored ones.
void DistributedDataParallelImpl::synchronized_parameters(std::vector<torch::Tensor>& params,
                                                          std::vector<std::string>& names) const {
  std::set<std::string> ignored = ignored_parameter_names();
  for (const auto& item : wrapped_->named_parameters()) {
    if (ignored.erase(item.key())) continue;
    if (!item.value().requires_grad()) continue;
    params.push_back(item.value());
    names.push_back(item.key());
  }
  if (!ignored.empty()) {
    throw InvalidArgument(group_->error_context(),
                          "parameters_to_ignore names '" + *ignored.begin() +
                              "', which the module does not have (names are as in the wrapped "
                              "module's named_parameters(), e.g. 'fc1.weight')");
  }
}

// parameters_to_ignore, as names of the wrapped module's parameters.
std::set<std::string> DistributedDataParallelImpl::ignored_parameter_names() const {
  std::set<std::string> ignored;
  for (std::string name : options_.parameters_to_ignore()) {
    const std::string prefix = std::string(kModuleName) + ".";
    if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
    ignored.insert(name);
  }
  return ignored;
}

// Outside a Join: buffers from rank 0, gradients divided by the world size.
// In one, a synchronized forward with grad enabled starts the Join's
// iteration (which ranks still train); other forwards issue no collective.
std::chrono::steady_clock::time_point DistributedDataParallelImpl::before_forward() {
  if (timeline_) timeline_->before_forward(reducer_->has_comm_hook());
  int64_t divisor = group_->size();
  int root = 0;
  bool broadcast = options_.broadcast_buffers() && require_backward_grad_sync_;
  if (join() && broadcast) broadcast = at::GradMode::is_enabled();
  const bool join_iteration = require_backward_grad_sync_ && at::GradMode::is_enabled();
  if (join() && !join_iteration) check_forward_can_be_shadowed();
  if (join() && join_iteration) {
    const JoinIteration it = join()->notify(*this);
    root = it.lowest_training_rank();
    if (!join()->options().divide_by_initial_world_size()) divisor = it.training_ranks;
  }
  if (divisor != divisor_) {
    reducer_->set_divisor(divisor);
    divisor_ = divisor;
  }
  if ((join() != nullptr) != uneven_inputs_) {
    uneven_inputs_ = join() != nullptr;
    reducer_->set_uneven_inputs(uneven_inputs_);
  }
  if (broadcast && !buffers_.empty()) {
    const auto start = std::chrono::steady_clock::now();
    detail::broadcast_coalesced(*group_, buffers_, root);
    if (timeline_) timeline_->broadcast_buffers(start, std::chrono::steady_clock::now());
  }
  lower_parameters();
  return std::chrono::steady_clock::now();
}

void DistributedDataParallelImpl::after_forward(const std::vector<torch::Tensor>& outputs,
                                                std::chrono::steady_clock::time_point start) {
  const auto end = std::chrono::steady_clock::now();
  const bool grad = at::GradMode::is_enabled();
  if (timeline_) {
    timeline_->forward(!grad                         ? "forward (no grad)"
                       : require_backward_grad_sync_ ? "forward"
                                                     : "forward (no_sync)",
                       start, end);
  }
  if (grad) {
    const double forward_ms = std::chrono::duration<double, std::milli>(end - start).count();
    reducer_->prepare_for_backward(outputs, require_backward_grad_sync_);
    if (require_backward_grad_sync_) reducer_->record_forward_time(forward_ms);
  }
  restore_parameters_after(outputs);  // after the Reducer's own end-of-backward step
}

IterationStats DistributedDataParallelImpl::stats() const { return reducer_->stats(); }

}  // namespace ddp
