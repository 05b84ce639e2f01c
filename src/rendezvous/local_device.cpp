#include <ddp/device.h>
#include <ddp/init.h>

#include <torch/cuda.h>

namespace ddp {

c10::Device local_device() {
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  if (count == 0) return c10::Device(c10::DeviceType::CPU);
  return c10::Device(c10::DeviceType::CUDA,
                     static_cast<c10::DeviceIndex>(launch_info_from_env().local_rank % count));
}

}  // namespace ddp
