// The bodies of the Gloo backend's collectives, run on a worker thread:
// each blocks until done and throws gloo::Exception on a communication
// failure. Arguments were validated by ProcessGroup.
#pragma once

#include <ddp/backends/gloo.h>

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <vector>

namespace gloo {
class Context;
}

namespace ddp::detail::gloo_ops {

// What every collective needs: the connected context, its unique tag, and
// its limits.
struct Call {
  std::shared_ptr<gloo::Context> context;
  uint32_t tag;
  std::chrono::milliseconds timeout;
  GlooOptions::Algorithm algorithm;
};

void allreduce(const Call& call, const at::Tensor& tensor, ReduceOp op);
void allreduce_coalesced(const Call& call, const std::vector<at::Tensor>& tensors, ReduceOp op);
void broadcast(const Call& call, const at::Tensor& tensor, int root);
void allgather(const Call& call, const std::vector<at::Tensor>& outputs, const at::Tensor& input);
void reduce_scatter(const Call& call, const at::Tensor& output,
                    const std::vector<at::Tensor>& inputs, ReduceOp op);
void barrier(const Call& call);

}  // namespace ddp::detail::gloo_ops
