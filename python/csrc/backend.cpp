#include "backend.h"

#include "errors.h"
#include "work.h"

#include <ddp/init.h>

#include <c10/util/Exception.h>

#include <string>
#include <utility>

namespace ddp_torch {
namespace {

// PyTorch's reduce ops that ddp has; the others are not supported.
ddp::ReduceOp reduce_op(const c10d::ReduceOp& op, const char* call) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return ddp::ReduceOp::SUM;
    case c10d::ReduceOp::AVG: return ddp::ReduceOp::AVG;
    case c10d::ReduceOp::PRODUCT: return ddp::ReduceOp::PRODUCT;
    case c10d::ReduceOp::MIN: return ddp::ReduceOp::MIN;
    case c10d::ReduceOp::MAX: return ddp::ReduceOp::MAX;
    default: break;
  }
  not_supported((std::string(call) + " with a bitwise or premultiplied ReduceOp").c_str(),
                "it reduces with SUM, AVG, PRODUCT, MIN and MAX");
}

const char kUseGlooInstead[] =
    "ddp offers allreduce, allreduce_coalesced, broadcast, all_gather, "
    "all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor and barrier; use a "
    "\"gloo\" group (dist.new_group(backend=\"gloo\")) for the rest";

}  // namespace

std::vector<at::Tensor> Backend::pieces(const at::Tensor& tensor, int64_t part,
                                        const char* call) const {
  const int parts = getSize();
  if (tensor.numel() != parts * part || !tensor.is_contiguous()) {
    C10_THROW_ERROR(ValueError,
                    where(call) + ": the large tensor must be contiguous and hold " +
                        std::to_string(parts) + " x " + std::to_string(part) +
                        " elements (the group's size times the other tensor's), not " +
                        std::to_string(tensor.numel()));
  }
  at::Tensor flat = tensor.view({-1});
  std::vector<at::Tensor> out;
  out.reserve(parts);
  for (int r = 0; r < parts; ++r) out.push_back(flat.narrow(0, r * part, part));
  return out;
}

Backend::Backend(const ddp::StorePtr& store, int rank, int size,
                 std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size),
      group_(translating_errors([&] {
        return ddp::new_process_group(store, rank, size, ddp::InitOptions().timeout(timeout));
      })) {}

std::string Backend::where(const char* call) const {
  return "ddp: " + ddp::format_context(group_->error_context(call));
}

const at::Tensor& Backend::single_tensor(const std::vector<at::Tensor>& tensors,
                                        const char* call) const {
  if (tensors.size() != 1) {
    C10_THROW_ERROR(ValueError, where(call) + ": takes one tensor (one device) per call, not " +
                                    std::to_string(tensors.size()));
  }
  return tensors[0];
}

c10::intrusive_ptr<c10d::Work> Backend::make_work(ddp::WorkPtr work, c10d::OpType type,
                                                std::chrono::milliseconds timeout,
                                                std::vector<at::Tensor> results) const {
  return c10::make_intrusive<Work>(std::move(work), getRank(), type,
                                   timeout.count() > 0 ? timeout : group_->timeout(),
                                   std::move(results));
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) {
  const at::Tensor& tensor = single_tensor(tensors, "allreduce");
  const ddp::ReduceOp op = reduce_op(opts.reduceOp, "allreduce");
  auto work = translating_errors([&] { return group_->allreduce(tensor, op); });
  return make_work(std::move(work), c10d::OpType::ALLREDUCE, opts.timeout, tensors);
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const ddp::ReduceOp op = reduce_op(opts.reduceOp, "allreduce_coalesced");
  auto work = translating_errors([&] { return group_->allreduce_coalesced(tensors, op); });
  return make_work(std::move(work), c10d::OpType::ALLREDUCE_COALESCED, opts.timeout, tensors);
}

c10::intrusive_ptr<c10d::Work> Backend::broadcast(std::vector<at::Tensor>& tensors,
                                                  const c10d::BroadcastOptions& opts) {
  const at::Tensor& tensor = single_tensor(tensors, "broadcast");
  auto work = translating_errors(
      [&] { return group_->broadcast(tensor, static_cast<int>(opts.rootRank)); });
  return make_work(std::move(work), c10d::OpType::BROADCAST, opts.timeout, tensors);
}

c10::intrusive_ptr<c10d::Work> Backend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  const at::Tensor& input = single_tensor(inputs, "allgather");
  if (outputs.size() != 1) {
    C10_THROW_ERROR(ValueError, where("allgather") + ": takes one list of outputs, not " +
                                    std::to_string(outputs.size()));
  }
  auto work = translating_errors([&] { return group_->allgather(outputs[0], input); });
  return make_work(std::move(work), c10d::OpType::ALLGATHER, opts.timeout, outputs[0]);
}

c10::intrusive_ptr<c10d::Work> Backend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::AllgatherOptions& opts) {
  auto work = translating_errors([&] {
    return group_->allgather(
        pieces(output, input.numel(), "all_gather_into_tensor"), input);
  });
  return make_work(std::move(work), c10d::OpType::_ALLGATHER_BASE, opts.timeout, {output});
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& output = single_tensor(outputs, "reduce_scatter");
  if (inputs.size() != 1) {
    C10_THROW_ERROR(ValueError, where("reduce_scatter") + ": takes one list of inputs, not " +
                                    std::to_string(inputs.size()));
  }
  const ddp::ReduceOp op = reduce_op(opts.reduceOp, "reduce_scatter");
  auto work = translating_errors([&] { return group_->reduce_scatter(output, inputs[0], op); });
  return make_work(std::move(work), c10d::OpType::REDUCE_SCATTER, opts.timeout, outputs);
}

c10::intrusive_ptr<c10d::Work> Backend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const ddp::ReduceOp op = reduce_op(opts.reduceOp, "reduce_scatter_tensor");
  auto work = translating_errors([&] {
    return group_->reduce_scatter(
        output, pieces(input, output.numel(), "reduce_scatter_tensor"), op);
  });
  return make_work(std::move(work), c10d::OpType::_REDUCE_SCATTER_BASE, opts.timeout, {output});
}

c10::intrusive_ptr<c10d::Work> Backend::barrier(const c10d::BarrierOptions& opts) {
  auto work = translating_errors([&] { return group_->barrier(); });
  return make_work(std::move(work), c10d::OpType::BARRIER, opts.timeout, {});
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce_sparse(std::vector<at::Tensor>&,
                                                         const c10d::AllreduceOptions&) {
  not_supported("sparse tensors", "ddp reduces dense, contiguous tensors");
}
c10::intrusive_ptr<c10d::Work> Backend::allgather_coalesced(std::vector<std::vector<at::Tensor>>&,
                                                            std::vector<at::Tensor>&,
                                                            const c10d::AllgatherOptions&) {
  not_supported("allgather_coalesced", kUseGlooInstead);
}
c10::intrusive_ptr<c10d::Work> Backend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>&, std::vector<at::Tensor>&, const c10d::AllgatherOptions&) {
  not_supported("allgather_into_tensor_coalesced", kUseGlooInstead);
}
c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>&, std::vector<at::Tensor>&, const c10d::ReduceScatterOptions&) {
  not_supported("reduce_scatter_tensor_coalesced", kUseGlooInstead);
}
void Backend::startCoalescing() {
  not_supported("coalescing managers (_coalescing_manager)",
                "issue the collectives one by one, or all_reduce_coalesced");
}
c10::intrusive_ptr<c10d::Work> Backend::endCoalescing() {
  not_supported("coalescing managers (_coalescing_manager)",
                "issue the collectives one by one, or all_reduce_coalesced");
}
void Backend::monitoredBarrier(const c10d::BarrierOptions&, bool) {
  not_supported("monitored_barrier",
                "use barrier; a rank that fails to arrive is named by DDP_FLIGHT_RECORDER_DIR");
}
c10::intrusive_ptr<c10d::Work> Backend::reduce(std::vector<at::Tensor>&,
                                               const c10d::ReduceOptions&) {
  not_supported("reduce", kUseGlooInstead);
}
c10::intrusive_ptr<c10d::Work> Backend::gather(std::vector<std::vector<at::Tensor>>&,
                                               std::vector<at::Tensor>&,
                                               const c10d::GatherOptions&) {
  not_supported("gather", kUseGlooInstead);
}
c10::intrusive_ptr<c10d::Work> Backend::scatter(std::vector<at::Tensor>&,
                                                std::vector<std::vector<at::Tensor>>&,
                                                const c10d::ScatterOptions&) {
  not_supported("scatter", kUseGlooInstead);
}
c10::intrusive_ptr<c10d::Work> Backend::alltoall_base(at::Tensor&, at::Tensor&,
                                                      std::vector<int64_t>&,
                                                      std::vector<int64_t>&,
                                                      const c10d::AllToAllOptions&) {
  not_supported("all_to_all_single", kUseGlooInstead);
}
c10::intrusive_ptr<c10d::Work> Backend::alltoall(std::vector<at::Tensor>&,
                                                 std::vector<at::Tensor>&,
                                                 const c10d::AllToAllOptions&) {
  not_supported("all_to_all", kUseGlooInstead);
}
c10::intrusive_ptr<c10d::Work> Backend::send(std::vector<at::Tensor>&, int, int) {
  not_supported("send (point-to-point)", kUseGlooInstead);
}
c10::intrusive_ptr<c10d::Work> Backend::recv(std::vector<at::Tensor>&, int, int) {
  not_supported("recv (point-to-point)", kUseGlooInstead);
}
c10::intrusive_ptr<c10d::Work> Backend::recvAnysource(std::vector<at::Tensor>&, int) {
  not_supported("recv from any source (point-to-point)", kUseGlooInstead);
}

}  // namespace ddp_torch
