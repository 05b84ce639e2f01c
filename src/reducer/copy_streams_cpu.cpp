// CopyStreams where libtorch has no CUDA: everything on the calling thread.
#include "reducer/copy_streams.h"

namespace ddp::detail {

struct CopyStreams::Streams {};

CopyStreams::CopyStreams() = default;
CopyStreams::~CopyStreams() = default;
CopyStreams::CopyStreams(CopyStreams&&) noexcept = default;
CopyStreams& CopyStreams::operator=(CopyStreams&&) noexcept = default;

void CopyStreams::write(const at::Tensor&, at::TensorList, const std::function<void()>& write) {
  write();
}

void CopyStreams::launch(const at::Tensor&, const std::function<void()>& launch) { launch(); }

}  // namespace ddp::detail
