// The stager of CUDA tensors on the host: per device, one stream for the
// copies to the host and one for the copies back, each ordered only by
// events, so that a bucket's copy to the host overlaps the rest of the
// backward and the previous bucket's copy back.
#include "collectives/stager.h"

#include "base/mutex.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <map>
#include <memory>

namespace ddp::detail {

namespace {

class CudaStager : public Stager {
 public:
  std::vector<at::Tensor> to_host(const std::vector<at::Tensor>& tensors, bool copy,
                                  Fence* copied) override {
    std::vector<at::Tensor> host;
    host.reserve(tensors.size());
    std::vector<std::shared_ptr<at::cuda::CUDAEvent>> done;
    for (const at::Tensor& t : tensors) {
      host.push_back(at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true)));
      if (!copy || t.numel() == 0) continue;
      const c10::cuda::CUDAGuard guard(t.device());
      const c10::cuda::CUDAStream stream = streams_of(t.device().index()).to_host;
      // After the tensor's producer, queued on the caller's current stream.
      at::cuda::CUDAEvent produced;
      produced.record(c10::cuda::getCurrentCUDAStream(t.device().index()));
      produced.block(stream);
      {
        const c10::cuda::CUDAStreamGuard on_stream(stream);
        host.back().copy_(t, /*non_blocking=*/true);
      }
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
      done.push_back(recorded_on(stream));
    }
    *copied = passed_all(std::move(done));
    return host;
  }

  Fence to_device(const std::vector<at::Tensor>& results,
                  const std::vector<at::Tensor>& originals) override {
    std::vector<std::shared_ptr<at::cuda::CUDAEvent>> done;
    for (size_t i = 0; i < originals.size(); ++i) {
      const at::Tensor& t = originals[i];
      if (t.numel() == 0) continue;
      const c10::cuda::CUDAGuard guard(t.device());
      const c10::cuda::CUDAStream stream = streams_of(t.device().index()).to_device;
      {
        const c10::cuda::CUDAStreamGuard on_stream(stream);
        t.copy_(results[i], /*non_blocking=*/true);
      }
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream);
      done.push_back(recorded_on(stream));
    }
    return passed_all(std::move(done));
  }

 private:
  struct Streams {
    c10::cuda::CUDAStream to_host;
    c10::cuda::CUDAStream to_device;
  };

  Streams streams_of(c10::DeviceIndex index) {
    MutexLock lock(mutex_);
    auto it = streams_.find(index);
    if (it == streams_.end()) {
      it = streams_
               .emplace(index, Streams{c10::cuda::getStreamFromPool(false, index),
                                       c10::cuda::getStreamFromPool(false, index)})
               .first;
    }
    return it->second;
  }

  static std::shared_ptr<at::cuda::CUDAEvent> recorded_on(const c10::cuda::CUDAStream& stream) {
    auto event = std::make_shared<at::cuda::CUDAEvent>();
    event->record(stream);
    return event;
  }

  static Fence passed_all(std::vector<std::shared_ptr<at::cuda::CUDAEvent>> events) {
    return [events = std::move(events)] {
      for (const auto& e : events) {
        if (!e->query()) return false;
      }
      return true;
    };
  }

  Mutex mutex_;
  std::map<c10::DeviceIndex, Streams> streams_ DDP_GUARDED_BY(mutex_);
};

}  // namespace

Stager* device_stager(c10::DeviceType type) {
  if (type != c10::DeviceType::CUDA) return nullptr;
  static CudaStager* const stager = new CudaStager();  // never destroyed: used from any thread
  return stager;
}

}  // namespace ddp::detail
