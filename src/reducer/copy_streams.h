// Where the Reducer writes gradients into their buckets. CUDA gradients go
// through a stream of the Reducer's own on their device, ordered after the
// work already queued on the caller's (autograd's) stream: the copies are
// memory-bound, the rest of backward mostly compute-bound, and on one stream
// the copies would wait for it and it for them. Buckets are then launched
// with that stream current, so that their collectives follow the copies.
// CPU gradients: on the calling thread, as before. Two implementations:
// copy_streams_cuda.cpp where libtorch has CUDA, copy_streams_cpu.cpp
// elsewhere (CMakeLists.txt picks one).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

namespace ddp::detail {

class CopyStreams {
 public:
  CopyStreams();
  ~CopyStreams();
  CopyStreams(CopyStreams&&) noexcept;
  CopyStreams& operator=(CopyStreams&&) noexcept;

  // Runs `write` (ops writing `bucket`, reading `grads`, undefined ones
  // skipped) in order after the caller's current stream, on the copy stream
  // of bucket's device; the grads' memory stays with the caching allocator's
  // bookkeeping until the copy stream has read it.
  void write(const at::Tensor& bucket, at::TensorList grads, const std::function<void()>& write);
  // Runs `launch` with the copy stream of `bucket`'s device current.
  void launch(const at::Tensor& bucket, const std::function<void()>& launch);

 private:
  struct Streams;
  std::unique_ptr<Streams> streams_;  // per device; null until a CUDA bucket is written
};

}  // namespace ddp::detail
