// The default communication hooks (PyTorch's documentation, "DDP
// Communication Hooks": "Default Communication Hooks"). Their state is the process group to reduce
// over; a null group means ddp::default_process_group().
#pragma once

#include <ddp/comm_hook.h>

#include <c10/core/ScalarType.h>

namespace ddp {

// Divides the bucket by the world size and allreduces it: the same gradients
// as registering no hook.
FuturePtr allreduce_hook(const ProcessGroupPtr& group, GradBucket& bucket);

// Casts the bucket to float16, divides by the world size, allreduces in
// float16 and casts the result back into the bucket.
FuturePtr fp16_compress_hook(const ProcessGroupPtr& group, GradBucket& bucket);

// The same in bfloat16.
FuturePtr bf16_compress_hook(const ProcessGroupPtr& group, GradBucket& bucket);

namespace detail {
// Runs `hook` on the bucket cast to `dtype` and casts its result back into
// the original buffer.
FuturePtr compress_wrapped(at::ScalarType dtype, GradBucket& bucket,
                           const std::function<FuturePtr(GradBucket&)>& hook);
}  // namespace detail

// Wraps any hook (of any state) so that it runs on the bucket cast to
// float16 and its result is cast back: fp16_compress_wrapper(allreduce_hook)
// is fp16_compress_hook.
//   model->register_comm_hook(state, ddp::fp16_compress_wrapper(ddp::powerSGD_hook));
template <typename Hook>
auto fp16_compress_wrapper(Hook hook) {
  return [hook](auto& state, GradBucket& bucket) {
    return detail::compress_wrapped(at::kHalf, bucket,
                                    [&](GradBucket& b) { return hook(state, b); });
  };
}

// The same in bfloat16.
template <typename Hook>
auto bf16_compress_wrapper(Hook hook) {
  return [hook](auto& state, GradBucket& bucket) {
    return detail::compress_wrapped(at::kBFloat16, bucket,
                                    [&](GradBucket& b) { return hook(state, b); });
  };
}

}  // namespace ddp
