// Communication hooks (PyTorch's documentation, "DDP Communication Hooks",
// torch.distributed.algorithms.ddp_comm_hooks): replace the plain
// allreduce of each gradient bucket, e.g. to compress it.
//
//   model->register_comm_hook(pg, ddp::fp16_compress_hook);
//   model->register_comm_hook(ddp::PowerSGDState(pg), ddp::powerSGD_hook);
//
// A hook takes its state and a GradBucket and returns a future
// (c10::ivalue::Future, libtorch's) of the reduced buffer: a 1-D tensor with
// the bucket buffer's length, holding the *average* across ranks (the bucket
// holds this rank's plain gradients; dividing is the hook's job). The reducer
// copies that result into the bucket if it is another tensor.
//
// Contract
// - Hooks run on the DDP communication thread, one bucket at a time, in
//   bucket order, while backward goes on. A hook may block on its own
//   collectives (PowerSGD does: P, then Q): that is what keeps chained
//   collectives in the same order on every rank. Callbacks attached with
//   Future::then run on a backend worker: they may compute, but must not
//   issue collectives.
// - Register once, before the first backward; a second registration or one
//   after training started is an InvalidArgument.
#pragma once

#include <ddp/process_group.h>
#include <ddp/work.h>

#include <ATen/core/ivalue.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace ddp {

using FuturePtr = c10::intrusive_ptr<c10::ivalue::Future>;

class GradBucket {
 public:
  GradBucket(size_t index, bool is_last, at::Tensor buffer, std::vector<at::Tensor> parameters,
             int64_t layout = 0);

  // The bucket's index. Warning: buckets are rebuilt after the first
  // iteration (and while bucket autotuning tries sizes), so an index may
  // refer to other parameters once layout() changed.
  size_t index() const { return index_; }
  // Which bucket layout this bucket belongs to: 0 in the first iteration,
  // one more at each rebuild. A hook that keeps something per bucket index
  // (error feedback, warm starts) drops it when this changes.
  int64_t layout() const { return layout_; }
  // The flattened 1-D gradients of this bucket's parameters.
  const at::Tensor& buffer() const { return buffer_; }
  // One tensor per parameter, shaped like it: views into buffer().
  std::vector<at::Tensor> gradients() const;
  // Whether this is the last bucket to be reduced in the iteration (it holds
  // the first layers of the forward pass).
  bool is_last() const { return is_last_; }
  // Replaces the buffer (same number of elements; any dtype): gradients()
  // then views the new one.
  void set_buffer(at::Tensor buffer);
  // The parameters, in the order of gradients().
  const std::vector<at::Tensor>& parameters() const { return parameters_; }

 private:
  size_t index_;
  bool is_last_;
  int64_t layout_;
  at::Tensor buffer_;
  std::vector<at::Tensor> parameters_;
};

// A hook with its state bound: what the reducer calls.
using CommHook = std::function<FuturePtr(GradBucket&)>;

// What a hook's state keeps between iterations, as named tensors, so that a
// checkpoint of a DistributedDataParallel (save_checkpoint) carries it and a
// resumed job goes on as if never stopped. A state class opts in with
//   HookStateDict state_dict() const;
//   void load_state_dict(const HookStateDict& dict);
// (PowerSGDState does). `shared` is the same on every rank: rank 0's is
// saved. `per_rank` is each rank's own (PowerSGD's error feedback): every
// rank's is saved, and each rank gets its own back when the job resumes
// with the same world size; in another world size it comes back empty (the
// state starts that part afresh).
struct HookStateDict {
  std::map<std::string, at::Tensor> shared;
  std::map<std::string, at::Tensor> per_rank;
};

// A registered hook's state, reached through the reducer (both empty: a
// state class without state_dict).
struct HookStateIO {
  std::function<HookStateDict()> save;
  std::function<void(const HookStateDict&)> load;
};

namespace detail {
template <typename State, typename = void>
struct HasStateDict : std::false_type {};
template <typename State>
struct HasStateDict<State,
                    std::void_t<decltype(std::declval<const State&>().state_dict()),
                                decltype(std::declval<State&>().load_state_dict(HookStateDict{}))>>
    : std::true_type {};
}  // namespace detail

// A future completed with `value` when `work` completes (with its error if it
// fails).
FuturePtr as_future(const WorkPtr& work, at::Tensor value);
// A future already completed with `value`.
FuturePtr completed_future(at::Tensor value);

}  // namespace ddp
