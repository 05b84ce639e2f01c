#include "reducer/gradient_order.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace ddp::detail {

void GradientOrder::end_iteration(size_t params) {
  if (recorded_) return;
  recorded_ = true;
  rebuild_due_ = rebuild_;
  for (size_t i = 0; i < params; ++i) {  // never arrived: at the end
    if (std::find(order_.begin(), order_.end(), i) == order_.end()) order_.push_back(i);
  }
}

std::vector<size_t> GradientOrder::take_rank0_order(ProcessGroup& group) {
  rebuild_due_ = false;
  at::Tensor order = at::tensor(std::vector<int64_t>(order_.begin(), order_.end()), at::kLong);
  group.broadcast(order, 0)->wait();
  return std::vector<size_t>(order.data_ptr<int64_t>(), order.data_ptr<int64_t>() + order.numel());
}

}  // namespace ddp::detail
