#include <ddp/comm_hook.h>

#include <ddp/errors.h>

#include <ATen/ATen.h>

namespace ddp {

GradBucket::GradBucket(size_t index, bool is_last, at::Tensor buffer,
                       std::vector<at::Tensor> parameters, int64_t layout)
    : index_(index),
      is_last_(is_last),
      layout_(layout),
      buffer_(std::move(buffer)),
      parameters_(std::move(parameters)) {}

std::vector<at::Tensor> GradBucket::gradients() const {
  std::vector<at::Tensor> out;
  int64_t offset = 0;
  for (const auto& p : parameters_) {
    out.push_back(buffer_.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
  return out;
}

void GradBucket::set_buffer(at::Tensor buffer) {
  if (buffer.dim() != 1 || buffer.numel() != buffer_.numel()) {
    throw InvalidArgument(ErrorContext{-1, 0, "", "GradBucket::set_buffer", {}},
                          "bucket " + std::to_string(index_) + " holds a 1-D buffer of " +
                              std::to_string(buffer_.numel()) + " elements; got one of shape " +
                              c10::str(buffer.sizes()));
  }
  buffer_ = std::move(buffer);
}

FuturePtr as_future(const WorkPtr& work, at::Tensor value) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
  work->on_complete([future, work, value = std::move(value)] {
    if (auto error = work->exception()) {
      future->setError(error);
    } else {
      future->markCompleted(value);
    }
  });
  return future;
}

FuturePtr completed_future(at::Tensor value) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
  future->markCompleted(std::move(value));
  return future;
}

}  // namespace ddp
