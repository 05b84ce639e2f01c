#include <ddp/distributed_data_parallel.h>

#include <ddp/errors.h>
#include <ddp/init.h>

#include "module/model_sync.h"
#include "rendezvous/default_group.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <set>

namespace ddp {
namespace {

constexpr const char* kModuleName = "module";

int64_t mib_to_bytes(double mib, const char* option) {
  if (mib < 0) {
    throw InvalidArgument(std::string("ddp: DistributedDataParallelOptions::") + option +
                          " must be >= 0, got " + std::to_string(mib));
  }
  return static_cast<int64_t>(mib * 1024 * 1024);
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

  // Parameters to synchronize: those requiring grad, minus the ignored ones.
  std::set<std::string> ignored;
  for (std::string name : options_.parameters_to_ignore()) {
    const std::string prefix = std::string(kModuleName) + ".";
    if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
    ignored.insert(name);
  }
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  for (const auto& item : wrapped->named_parameters()) {
    if (ignored.erase(item.key())) continue;
    if (!item.value().requires_grad()) continue;
    params.push_back(item.value());
    names.push_back(item.key());
  }
  if (!ignored.empty()) {
    throw InvalidArgument("ddp: rank " + std::to_string(group_->rank()) +
                          ": parameters_to_ignore names '" + *ignored.begin() +
                          "', which the module does not have (names are as in the wrapped "
                          "module's named_parameters(), e.g. 'fc1.weight')");
  }
  for (const auto& b : wrapped->buffers()) buffers_.push_back(b);

  // The Reducer checks the parameters across ranks (collective) first.
  reducer_ = std::make_unique<Reducer>(
      params, names, group_,
      ReducerOptions()
          .bucket_cap_bytes(mib_to_bytes(options_.bucket_cap_mb(), "bucket_cap_mb"))
          .first_bucket_cap_bytes(
              mib_to_bytes(options_.first_bucket_cap_mb(), "first_bucket_cap_mb"))
          .find_unused_parameters(options_.find_unused_parameters())
          .gradient_as_bucket_view(options_.gradient_as_bucket_view())
          .static_graph(options_.static_graph())
          .overlap_communication(options_.overlap_communication()));
  if (options_.init_sync()) {
    std::vector<torch::Tensor> all_params;
    for (const auto& p : wrapped->parameters()) all_params.push_back(p);
    std::vector<std::string> buffer_names;
    for (const auto& item : wrapped->named_buffers()) buffer_names.push_back(item.key());
    detail::verify_same_tensors(*group_, buffers_, buffer_names, "buffers");
    all_params.insert(all_params.end(), buffers_.begin(), buffers_.end());
    detail::broadcast_coalesced(*group_, all_params, 0);
  }
}

std::chrono::steady_clock::time_point DistributedDataParallelImpl::before_forward() {
  if (options_.broadcast_buffers() && require_backward_grad_sync_ && !buffers_.empty()) {
    detail::broadcast_coalesced(*group_, buffers_, 0);
  }
  return std::chrono::steady_clock::now();
}

void DistributedDataParallelImpl::after_forward(const std::vector<torch::Tensor>& outputs,
                                                std::chrono::steady_clock::time_point start) {
  if (!at::GradMode::is_enabled()) return;  // no backward can follow
  const double forward_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  reducer_->prepare_for_backward(outputs, require_backward_grad_sync_);
  if (require_backward_grad_sync_) reducer_->record_forward_time(forward_ms);
}

IterationStats DistributedDataParallelImpl::stats() const { return reducer_->stats(); }

}  // namespace ddp
