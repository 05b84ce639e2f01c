// OptimizerJoinable (join.h): the optimizer's state of the last rank to
// finish, serialized as libtorch saves it and broadcast as bytes.
#include <ddp/join.h>

#include "rendezvous/default_group.h"

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <cstring>
#include <sstream>
#include <string>

namespace ddp {

OptimizerJoinable::OptimizerJoinable(torch::optim::Optimizer& optimizer, ProcessGroupPtr group)
    : optimizer_(optimizer), group_(detail::group_or_default(group)) {}

void OptimizerJoinable::finish_join(int last_rank) {
  const bool source = group_->rank() == last_rank;
  std::string bytes;
  if (source) {
    torch::serialize::OutputArchive archive;
    optimizer_.save(archive);
    std::ostringstream out;
    archive.save_to(out);
    bytes = out.str();
  }
  at::Tensor size = at::tensor({static_cast<int64_t>(bytes.size())}, at::kLong);
  group_->broadcast(size, last_rank)->wait();
  at::Tensor data = at::empty({size.item<int64_t>()}, at::kByte);
  if (source) std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
  group_->broadcast(data, last_rank)->wait();
  if (source) return;
  std::istringstream in(std::string(static_cast<const char*>(data.data_ptr()), data.numel()));
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  optimizer_.load(archive);
}

}  // namespace ddp
