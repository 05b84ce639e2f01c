#include "reducer/unused_agreement.h"

#include <ddp/errors.h>

#include <ATen/ATen.h>

namespace ddp::detail {

void check_same_unused(ProcessGroup& group, const std::vector<bool>& left_out,
                       const std::vector<std::string>& names) {
  at::Tensor counts = at::zeros({static_cast<int64_t>(left_out.size())}, at::kInt);
  int32_t* mine = counts.data_ptr<int32_t>();
  for (size_t i = 0; i < left_out.size(); ++i) mine[i] = left_out[i] ? 1 : 0;
  group.allreduce(counts)->wait();
  const int32_t* all = counts.data_ptr<int32_t>();
  for (size_t i = 0; i < left_out.size(); ++i) {
    if (all[i] == 0 || all[i] == group.size()) continue;
    throw InvalidArgument(
        group.error_context("skip_all_reduce_unused_params"),
        "parameter #" + std::to_string(i) + " '" + names.at(i) + "' is unused on " +
            std::to_string(all[i]) + " of " + std::to_string(group.size()) + " ranks (" +
            (left_out[i] ? "unused" : "used") +
            " here); skipping unused parameters needs the same ones unused on every rank. "
            "Leave skip_all_reduce_unused_params off for a model whose unused parameters "
            "depend on its input");
  }
}

}  // namespace ddp::detail
