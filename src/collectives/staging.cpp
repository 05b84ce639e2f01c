#include "collectives/staging.h"

#include <ATen/ATen.h>

namespace ddp::detail {

at::Tensor staged_copy(const at::Tensor& tensor, const c10::Device& device, bool copy) {
  at::Tensor staged =
      at::empty(tensor.sizes(), tensor.options().device(device).pinned_memory(device.is_cpu()));
  // A blocking copy: it runs on the caller's current stream after what is
  // already queued there (the tensor's producer) and returns when done.
  if (copy) staged.copy_(tensor, /*non_blocking=*/false);
  return staged;
}

std::vector<at::Tensor> staged_copies(const std::vector<at::Tensor>& tensors,
                                      const c10::Device& device, bool copy) {
  std::vector<at::Tensor> staged;
  staged.reserve(tensors.size());
  for (const auto& t : tensors) staged.push_back(staged_copy(t, device, copy));
  return staged;
}

WorkPtr copy_back_on_completion(const WorkPtr& staged_work, std::vector<at::Tensor> originals,
                                std::vector<at::Tensor> results,
                                std::chrono::milliseconds timeout) {
  auto work = std::make_shared<Work>(staged_work->context(), timeout, originals);
  // The callback holds staged_work until it has run (Work drops its callbacks then).
  staged_work->on_complete(
      [work, staged_work, originals = std::move(originals), results = std::move(results)]() {
        std::exception_ptr error = staged_work->exception();
        if (!error) {
          try {
            // Blocking copies: the originals hold the result once they return.
            for (size_t i = 0; i < originals.size(); ++i) originals[i].copy_(results[i]);
          } catch (...) {
            error = std::current_exception();
          }
        }
        work->finish(error);
      });
  return work;
}

}  // namespace ddp::detail
