// CopyStreams where libtorch has CUDA: one copy stream per device.
#include "reducer/copy_streams.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <map>

namespace ddp::detail {

struct CopyStreams::Streams {
  struct Device {
    c10::cuda::CUDAStream stream;
    at::cuda::CUDAEvent ready;  // reused: each wait takes the state at its record
  };
  std::map<c10::DeviceIndex, Device> devices;

  Device& of(const at::Tensor& t) {
    const c10::DeviceIndex index = t.device().index();
    auto it = devices.find(index);
    if (it == devices.end()) {
      it = devices.emplace(index, Device{c10::cuda::getStreamFromPool(false, index), {}}).first;
    }
    return it->second;
  }
};

CopyStreams::CopyStreams() = default;
CopyStreams::~CopyStreams() = default;
CopyStreams::CopyStreams(CopyStreams&&) noexcept = default;
CopyStreams& CopyStreams::operator=(CopyStreams&&) noexcept = default;

void CopyStreams::write(const at::Tensor& bucket, at::TensorList grads,
                        const std::function<void()>& write) {
  if (!bucket.is_cuda()) return write();
  if (!streams_) streams_ = std::make_unique<Streams>();
  Streams::Device& d = streams_->of(bucket);
  c10::cuda::CUDAGuard guard(bucket.device());
  d.ready.record(c10::cuda::getCurrentCUDAStream(bucket.device().index()));
  d.ready.block(d.stream);
  {
    c10::cuda::CUDAStreamGuard on_copy_stream(d.stream);
    write();
  }
  for (const at::Tensor& grad : grads) {
    if (grad.defined() && grad.is_cuda() && grad.numel() > 0) {
      c10::cuda::CUDACachingAllocator::recordStream(grad.storage().data_ptr(), d.stream);
    }
  }
}

void CopyStreams::launch(const at::Tensor& bucket, const std::function<void()>& launch) {
  if (!bucket.is_cuda() || !streams_) return launch();
  c10::cuda::CUDAStreamGuard on_copy_stream(streams_->of(bucket).stream);
  launch();
}

}  // namespace ddp::detail
