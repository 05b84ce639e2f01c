#include <ddp/hooks/debugging_hooks.h>
#include <ddp/hooks/default_hooks.h>

#include "rendezvous/default_group.h"

#include <ATen/ATen.h>

namespace ddp {
namespace {

// Casts to `dtype`, divides, allreduces, and writes the result back into the
// bucket's own buffer.
FuturePtr compress_hook(at::ScalarType dtype, const ProcessGroupPtr& group, GradBucket& bucket) {
  auto pg = detail::group_or_default(group);
  at::Tensor buffer = bucket.buffer();
  at::Tensor compressed = buffer.to(dtype).div_(pg->size());
  auto future = as_future(pg->allreduce(compressed), compressed);
  return future->then(
      [buffer](c10::ivalue::Future& done) -> c10::IValue {
        return buffer.copy_(done.value().toTensor());
      },
      c10::TensorType::get());
}

}  // namespace

FuturePtr allreduce_hook(const ProcessGroupPtr& group, GradBucket& bucket) {
  auto pg = detail::group_or_default(group);
  at::Tensor buffer = bucket.buffer();
  buffer.div_(pg->size());
  return as_future(pg->allreduce(buffer), buffer);
}

FuturePtr fp16_compress_hook(const ProcessGroupPtr& group, GradBucket& bucket) {
  return compress_hook(at::kHalf, group, bucket);
}

FuturePtr bf16_compress_hook(const ProcessGroupPtr& group, GradBucket& bucket) {
  return compress_hook(at::kBFloat16, group, bucket);
}

FuturePtr detail::compress_wrapped(at::ScalarType dtype, GradBucket& bucket,
                                   const std::function<FuturePtr(GradBucket&)>& hook) {
  at::Tensor original = bucket.buffer();
  bucket.set_buffer(original.to(dtype));
  FuturePtr inner = hook(bucket);
  bucket.set_buffer(original);
  return inner->then(
      [original](c10::ivalue::Future& done) -> c10::IValue {
        return original.copy_(done.value().toTensor());
      },
      c10::TensorType::get());
}

FuturePtr noop_hook(const ProcessGroupPtr&, GradBucket& bucket) {
  return completed_future(bucket.buffer());
}

}  // namespace ddp
