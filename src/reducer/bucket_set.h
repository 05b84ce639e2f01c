// The Reducer's gradient buckets: flat buffers, one slice per parameter, and
// the reduction in flight for each (paper §3.2.3, §4.2).
#pragma once

#include <ddp/comm_hook.h>
#include <ddp/process_group.h>

#include <ATen/core/Tensor.h>

#include <chrono>
#include <optional>
#include <vector>

namespace ddp::detail {

struct Bucket {
  at::Tensor flat;
  std::vector<size_t> params;     // parameter indices, in slice order
  std::vector<at::Tensor> views;  // views[k]: the slice of params[k], shaped like it
  // batched_grad_copy: the slices written when the bucket is full, and what
  // goes into each (undefined: zeros), in the order they became ready.
  std::vector<at::Tensor> staged_views, staged_grads;
  size_t pending = 0;             // parameters not ready yet this iteration
  int64_t live_numel = 0;         // elements sent this iteration: a prefix of flat
  WorkPtr work;                   // the allreduce, without a communication hook
  FuturePtr future;               // the hook's result, with one
  std::chrono::steady_clock::time_point launched, done;  // this iteration
  at::Tensor spare;                     // the other buffer (double buffering), and its
  std::vector<at::Tensor> spare_views;  // slices: allocated at the first swap unless zero-copy
  // Which members `views` (and spare_views) leave out, packing the others
  // (BucketSet::pack); none: the layout of construction.
  std::vector<bool> views_leave_out, spare_views_leave_out;

  // What this iteration's reduction sends: the live members' slices.
  at::Tensor sent() const {
    return live_numel == flat.numel() ? flat : flat.narrow(0, 0, live_numel);
  }
};

class BucketSet {
 public:
  BucketSet() = default;
  // Allocates a bucket per entry of `assignment` (indices into `params`).
  // With `gradient_as_bucket_view`, gradients move into their new slices.
  // With a `zero_copy` group (collective: every rank builds the same
  // buckets), buffers and spares come from its zero-copy memory when its
  // backend has some. `dtype`: the buckets' (default: their parameters').
  BucketSet(const std::vector<at::Tensor>& params,
            const std::vector<std::vector<size_t>>& assignment, bool gradient_as_bucket_view,
            ProcessGroup* zero_copy = nullptr, std::optional<at::ScalarType> dtype = std::nullopt);

  size_t size() const { return buckets_.size(); }
  Bucket& operator[](size_t b) { return buckets_[b]; }
  const std::vector<Bucket>& all() const { return buckets_; }
  // Parameter `param`'s bucket, and its slice there.
  Bucket& of(size_t param) { return buckets_[slots_[param].bucket]; }
  at::Tensor& view(size_t param) { return of(param).views[slots_[param].index]; }

  // A synchronized iteration begins: every bucket pending again. A
  // reduction still in flight (launched for a forward whose backward never
  // came) is waited for first, within `group`'s timeout.
  void begin_iteration(const ProcessGroup& group);

  // Layer-drop hints: this iteration leaves the `dropped` parameters out
  // (none: the layout of construction). Each bucket's other members are
  // packed at the front of its buffer, in slice order, and only they are
  // waited for and sent (Bucket::sent; a bucket left empty sends nothing).
  // Collective in effect: every rank must pack alike. After begin_iteration.
  void pack(const std::vector<bool>& dropped);
  // Whether `t`'s memory lies in parameter `param`'s current bucket buffer.
  bool in_buffer(size_t param, const at::Tensor& t) const;

  // Exchanges each bucket's buffer with its spare: the reduced buffers stay
  // with the gradients that alias them, the spares take the next iteration.
  void swap_buffers();

  // Waits (each within `group`'s timeout) for every bucket's reduction and
  // copies a hook's result into its bucket; returns when the last one
  // completed (for hooks: when it was seen complete), at least `since`.
  std::chrono::steady_clock::time_point wait_all(const ProcessGroup& group,
                                                 std::chrono::steady_clock::time_point since);

 private:
  struct Slot {
    size_t bucket = 0;
    size_t index = 0;
  };
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;  // parameter -> its bucket slice
};

}  // namespace ddp::detail
