#include "collectives/host_staging.h"

#include <ATen/ATen.h>

namespace ddp::detail {

at::Tensor host_copy(const at::Tensor& tensor, bool copy) {
  at::Tensor host = at::empty(tensor.sizes(), tensor.options().device(at::kCPU).pinned_memory(true));
  // A blocking copy: it runs on the caller's current stream after what is
  // already queued there (the gradient's producer) and returns when done.
  if (copy) host.copy_(tensor, /*non_blocking=*/false);
  return host;
}

std::vector<at::Tensor> host_copies(const std::vector<at::Tensor>& tensors, bool copy) {
  std::vector<at::Tensor> hosts;
  hosts.reserve(tensors.size());
  for (const auto& t : tensors) hosts.push_back(host_copy(t, copy));
  return hosts;
}

WorkPtr copy_back_on_completion(const WorkPtr& host_work, std::vector<at::Tensor> devices,
                                std::vector<at::Tensor> results,
                                std::chrono::milliseconds timeout) {
  auto work = std::make_shared<Work>(host_work->description(), timeout, devices);
  // The callback holds host_work until it has run (Work drops its callbacks then).
  host_work->on_complete([work, host_work, devices = std::move(devices),
                          results = std::move(results)]() {
    std::exception_ptr error = host_work->exception();
    if (!error) {
      try {
        // Blocking copies: the device holds the result once they return.
        for (size_t i = 0; i < devices.size(); ++i) devices[i].copy_(results[i]);
      } catch (...) {
        error = std::current_exception();
      }
    }
    work->finish(error);
  });
  return work;
}

}  // namespace ddp::detail
