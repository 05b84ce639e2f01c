#include "reducer/bucket_set.h"

#include <ddp/errors.h>

#include "hooks/hook_runner.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/strides.h>

#include <algorithm>

namespace ddp::detail {
namespace {

// A tensor on `flat`'s storage at `offset` with `sizes`, which autograd does
// not track as a view: gradients that are bucket slices must survive the
// optimizer's zero_grad(), which detaches them in place (libtorch 1.13).
at::Tensor alias(const at::Tensor& flat, int64_t offset, at::IntArrayRef sizes) {
  return at::empty({0}, flat.options())
      .set_(flat.storage(), flat.storage_offset() + offset, sizes, c10::contiguous_strides(sizes));
}

// Carves each bucket's buffer (and spare) from one zero-copy region, at
// 64-byte aligned offsets, the same on every rank; plain memory on the
// parameters' device otherwise. The region is host memory: CUDA parameters
// keep their buckets on their GPU.
class BucketMemory {
 public:
  BucketMemory(const std::vector<at::Tensor>& params,
               const std::vector<std::vector<size_t>>& assignment, bool spares,
               ProcessGroup* zero_copy, std::optional<at::ScalarType> dtype) {
    if (!zero_copy || params.empty() || !params[0].device().is_cpu()) return;
    int64_t bytes = 0;
    for (const auto& members : assignment) {
      const int64_t element = dtype ? static_cast<int64_t>(c10::elementSize(*dtype))
                                    : params[members[0]].element_size();
      bytes += (spares ? 2 : 1) * aligned(numel(params, members) * element);
    }
    region_ = zero_copy->allocate_zero_copy(bytes);
  }
  bool zero_copy() const { return region_.defined(); }

  at::Tensor next(int64_t numel, const at::TensorOptions& options) {
    if (!region_.defined()) return at::zeros({numel}, options);
    const int64_t element = static_cast<int64_t>(c10::elementSize(options.dtype().toScalarType()));
    at::Tensor t = at::empty({0}, options).set_(region_.storage(), offset_ / element, {numel}, {1});
    offset_ += aligned(numel * element);
    return t;
  }

  static int64_t numel(const std::vector<at::Tensor>& params, const std::vector<size_t>& members) {
    int64_t total = 0;
    for (size_t i : members) total += params[i].numel();
    return total;
  }

 private:
  static int64_t aligned(int64_t bytes) { return (bytes + 63) / 64 * 64; }
  at::Tensor region_;
  int64_t offset_ = 0;
};

}  // namespace

BucketSet::BucketSet(const std::vector<at::Tensor>& params,
                     const std::vector<std::vector<size_t>>& assignment,
                     bool gradient_as_bucket_view, ProcessGroup* zero_copy,
                     std::optional<at::ScalarType> dtype) {
  at::NoGradGuard no_grad;
  BucketMemory memory(params, assignment, /*spares=*/!gradient_as_bucket_view, zero_copy, dtype);
  slots_.assign(params.size(), Slot{});
  for (const auto& members : assignment) {
    Bucket b;
    b.params = members;
    const int64_t total = BucketMemory::numel(params, members);
    auto options = params[members[0]].options().requires_grad(false);
    if (dtype) options = options.dtype(*dtype);
    b.flat = memory.next(total, options);
    if (memory.zero_copy() && !gradient_as_bucket_view) b.spare = memory.next(total, options);
    int64_t offset = 0;
    for (size_t i : members) {
      slots_[i] = Slot{buckets_.size(), b.views.size()};
      b.views.push_back(alias(b.flat, offset, params[i].sizes()));
      offset += params[i].numel();
      // Gradients that were views of the old buckets move to the new ones.
      at::Tensor& grad = params[i].mutable_grad();
      if (gradient_as_bucket_view && grad.defined() &&
          grad.scalar_type() == b.views.back().scalar_type()) {
        b.views.back().copy_(grad);
        grad = b.views.back();
      }
    }
    b.live_numel = total;
    b.views_leave_out.assign(members.size(), false);
    buckets_.push_back(std::move(b));
  }
}

void BucketSet::pack(const std::vector<bool>& dropped) {
  for (auto& b : buckets_) {
    std::vector<bool> leave_out(b.params.size());
    for (size_t k = 0; k < b.params.size(); ++k) leave_out[k] = dropped[b.params[k]];
    const bool relayout = leave_out != b.views_leave_out;
    size_t live = 0;
    int64_t offset = 0;
    for (size_t k = 0; k < b.params.size(); ++k) {
      if (leave_out[k]) continue;
      if (relayout) b.views[k] = alias(b.flat, offset, b.views[k].sizes());
      offset += b.views[k].numel();
      ++live;
    }
    b.views_leave_out = std::move(leave_out);
    b.pending = live;
    b.live_numel = offset;
  }
}

bool BucketSet::in_buffer(size_t param, const at::Tensor& t) const {
  const at::Tensor& flat = buckets_[slots_[param].bucket].flat;
  const char* begin = static_cast<const char*>(flat.data_ptr());
  const char* p = static_cast<const char*>(t.data_ptr());
  return p >= begin && p < begin + flat.numel() * flat.element_size();
}

void BucketSet::begin_iteration(const ProcessGroup& group) {
  for (auto& b : buckets_) {
    if (b.work && !b.work->is_completed()) b.work->wait();
    if (b.future) wait_for(b.future, group, "communication hook");
    b.pending = b.params.size();
    b.live_numel = b.flat.numel();
    b.staged_views.clear();
    b.staged_grads.clear();
    b.work.reset();
    b.future.reset();
  }
}

void BucketSet::swap_buffers() {
  for (auto& b : buckets_) {
    if (!b.spare.defined()) b.spare = at::zeros_like(b.flat);
    if (b.spare_views.empty()) {
      b.spare_views_leave_out.assign(b.views.size(), false);
      int64_t offset = 0;
      for (const auto& v : b.views) {
        b.spare_views.push_back(alias(b.spare, offset, v.sizes()));
        offset += v.numel();
      }
    }
    std::swap(b.flat, b.spare);
    std::swap(b.views, b.spare_views);
    std::swap(b.views_leave_out, b.spare_views_leave_out);
  }
}

std::chrono::steady_clock::time_point BucketSet::wait_all(
    const ProcessGroup& group, std::chrono::steady_clock::time_point since) {
  auto last = since;
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    if (!b.work && !b.future) {  // left empty by layer-drop hints: nothing sent
      b.done = b.launched;
      continue;
    }
    if (b.work) {
      b.work->wait();
      b.done = b.work->completion_time();
      last = std::max(last, b.done);
      continue;
    }
    at::Tensor reduced =
        wait_for(b.future, group, "the communication hook of bucket " + std::to_string(k));
    b.done = std::chrono::steady_clock::now();
    last = std::max(last, b.done);
    if (!reduced.defined() || reduced.numel() != b.flat.numel()) {
      throw InvalidArgument(group.error_context(),
                            "the communication hook returned a tensor of " +
                                (reduced.defined() ? std::to_string(reduced.numel()) : "no") +
                                " elements for bucket " + std::to_string(k) + " of " +
                                std::to_string(b.flat.numel()));
    }
    if (reduced.data_ptr() != b.flat.data_ptr()) b.flat.copy_(reduced.reshape(-1));
  }
  return last;
}

}  // namespace ddp::detail
