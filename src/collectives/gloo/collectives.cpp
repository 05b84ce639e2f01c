// Collectives on Gloo. allreduce, broadcast, allgather and barrier use
// Gloo's own algorithms; coalesced allreduce flattens into one buffer.
//
// reduce_scatter is a ring on Gloo's unbound buffers (Gloo has none over
// them): the input is n chunks, chunk r destined to rank r. In step s
// (0 <= s < n-1) rank r sends its partial chunk (r-s-1) mod n to its right
// neighbour and receives chunk (r-s-2) mod n from its left one, reducing it
// into its own copy; after n-1 steps chunk r on rank r holds all n
// contributions.
#include "collectives/gloo/collectives.h"

#include "collectives/reduce_kernels.h"

#include <ATen/ATen.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/types.h>

namespace ddp::detail::gloo_ops {
namespace {

constexpr uint8_t kReduceScatterSlotPrefix = 0x7e;  // unused by Gloo itself

// Gloo's options are typed only by element size; reduction is ours.
template <typename F>
void with_element_type(size_t element_size, F&& f) {
  switch (element_size) {
    case 1:
      f(uint8_t{});
      break;
    case 2:
      f(uint16_t{});
      break;
    case 4:
      f(uint32_t{});
      break;
    case 8:
      f(uint64_t{});
      break;
    default:
      throw std::logic_error("ddp: unsupported element size");
  }
}

template <typename T>
T* data(const at::Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.view(-1));
  return at::cat(flat);
}

void finish_average(const Call& call, const at::Tensor& tensor, ReduceOp op) {
  if (op == ReduceOp::AVG) tensor.div_(call.context->size);
}

}  // namespace

void allreduce(const Call& call, const at::Tensor& tensor, ReduceOp op) {
  if (tensor.numel() == 0) return;
  if (call.context->size > 1) {
    gloo::AllreduceOptions opts(call.context);
    with_element_type(tensor.element_size(), [&](auto type) {
      opts.setOutput(data<decltype(type)>(tensor), tensor.numel());
    });
    opts.setReduceFunction(reduce_kernel(tensor.scalar_type(), op));
    opts.setAlgorithm(call.algorithm == GlooOptions::Algorithm::BCUBE
                          ? gloo::AllreduceOptions::Algorithm::BCUBE
                          : gloo::AllreduceOptions::Algorithm::RING);
    opts.setTag(call.tag);
    opts.setTimeout(call.timeout);
    gloo::allreduce(opts);
  }
  finish_average(call, tensor, op);
}

void allreduce_coalesced(const Call& call, const std::vector<at::Tensor>& tensors, ReduceOp op) {
  if (tensors.size() == 1) return allreduce(call, tensors[0], op);
  at::Tensor flat = flatten(tensors);
  allreduce(call, flat, op);
  int64_t offset = 0;
  for (const auto& t : tensors) {
    t.view(-1).copy_(flat.narrow(0, offset, t.numel()));
    offset += t.numel();
  }
}

void broadcast(const Call& call, const at::Tensor& tensor, int root) {
  if (tensor.numel() == 0 || call.context->size == 1) return;
  gloo::BroadcastOptions opts(call.context);
  with_element_type(tensor.element_size(), [&](auto type) {
    using T = decltype(type);
    if (call.context->rank == root) opts.setInput(data<T>(tensor), tensor.numel());
    opts.setOutput(data<T>(tensor), tensor.numel());
  });
  opts.setRoot(root);
  opts.setTag(call.tag);
  opts.setTimeout(call.timeout);
  gloo::broadcast(opts);
}

void allgather(const Call& call, const std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  const int64_t n = input.numel();
  if (n == 0) return;
  const int size = call.context->size;
  at::Tensor flat = at::empty({size * n}, input.options());
  if (size == 1) {
    flat.copy_(input.view(-1));
  } else {
    gloo::AllgatherOptions opts(call.context);
    with_element_type(input.element_size(), [&](auto type) {
      using T = decltype(type);
      opts.setInput(data<T>(input), n);
      opts.setOutput(data<T>(flat), size * n);
    });
    opts.setTag(call.tag);
    opts.setTimeout(call.timeout);
    gloo::allgather(opts);
  }
  for (int r = 0; r < size; ++r) outputs[r].view(-1).copy_(flat.narrow(0, r * n, n));
}

void reduce_scatter(const Call& call, const at::Tensor& output,
                    const std::vector<at::Tensor>& inputs, ReduceOp op) {
  const int64_t n = output.numel();
  if (n == 0) return;
  const int size = call.context->size, rank = call.context->rank;
  at::Tensor buffer = flatten(inputs);
  if (size > 1) {
    at::Tensor incoming = at::empty({n}, output.options());
    const size_t bytes = n * output.element_size();
    auto* base = static_cast<char*>(buffer.data_ptr());
    auto send_buf = call.context->createUnboundBuffer(base, buffer.nbytes());
    auto recv_buf = call.context->createUnboundBuffer(incoming.data_ptr(), bytes);
    auto reduce = reduce_kernel(output.scalar_type(), op);
    const int left = (rank + size - 1) % size, right = (rank + 1) % size;
    const auto slot = gloo::Slot::build(kReduceScatterSlotPrefix, call.tag);
    for (int step = 0; step < size - 1; ++step) {
      const int send_chunk = ((rank - step - 1) % size + size) % size;
      const int recv_chunk = ((rank - step - 2) % size + size) % size;
      // Steps run one after another, so a slot reused after 256 steps
      // cannot meet a message of an earlier step still in flight.
      const uint64_t step_slot = slot + static_cast<uint8_t>(step);
      recv_buf->recv(left, step_slot, 0, bytes);
      send_buf->send(right, step_slot, send_chunk * bytes, bytes);
      recv_buf->waitRecv(call.timeout);
      char* target = base + recv_chunk * bytes;
      reduce(target, target, incoming.data_ptr(), n);
      send_buf->waitSend(call.timeout);
    }
  }
  output.view(-1).copy_(buffer.narrow(0, rank * n, n));
  finish_average(call, output, op);
}

void barrier(const Call& call) {
  if (call.context->size == 1) return;
  gloo::BarrierOptions opts(call.context);
  opts.setTag(call.tag);
  opts.setTimeout(call.timeout);
  gloo::barrier(opts);
}

}  // namespace ddp::detail::gloo_ops
