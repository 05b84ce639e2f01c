// ddp_torch::Backend: ddp's ProcessGroup (ddp/process_group.h) as a
// torch.distributed backend (c10d::Backend), registered in Python as "ddp"
// (ddp_torch/__init__.py).
//
// Contract
// - Built on the store PyTorch passes (a PrefixStore of its own per group)
//   with ddp::new_process_group: the backend is "auto" (shared memory within
//   a host, Gloo across hosts, composed hierarchically) unless $DDP_BACKEND
//   names another; DDP_DEBUG=detail checks every collective's fingerprint
//   across ranks first.
// - CPU tensors, one per call (PyTorch's one-device form), dense and
//   contiguous, of the dtypes ddp's CPU backends take.
// - Offers allreduce (SUM, AVG, MIN, MAX, PRODUCT), allreduce_coalesced,
//   broadcast, allgather (into a list and into a tensor), reduce_scatter
//   (from a list and from a tensor), and barrier: what PyTorch's DDP and
//   ZeroRedundancyOptimizer call. The other calls of c10d::Backend raise
//   NotImplementedError naming the call (errors.h), coalescing managers
//   included.
// - Every collective is asynchronous: it returns a Work (work.h) at once.
//   Misuse raises ValueError with ddp's message; a failure (a peer gone, a
//   timeout) raises torch.distributed.DistBackendError from the Work.
#pragma once

#include <ddp/process_group.h>
#include <ddp/store.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace ddp_torch {

class Backend : public c10d::Backend {
 public:
  // Collective: every rank of the group calls it with the same store.
  Backend(const ddp::StorePtr& store, int rank, int size, std::chrono::milliseconds timeout);

  const std::string getBackendName() const override { return "ddp"; }
  // The backend ddp chose ("shm", "hierarchical(shm+gloo)", ...).
  std::string ddp_backend_name() const { return group_->backend_name(); }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Not offered: NotImplementedError naming the call (errors.h).
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;

 private:
  // "ddp: rank 1 of 4 [shm]: `call`": how this backend's own errors start.
  std::string where(const char* call) const;
  // The one tensor of PyTorch's one-device form; ValueError naming `call`
  // otherwise.
  const at::Tensor& single_tensor(const std::vector<at::Tensor>& tensors,
                                  const char* call) const;
  // `tensor`, flat, in getSize() consecutive pieces of `part` elements: the
  // one-tensor forms of allgather and reduce_scatter; ValueError naming
  // `call` when it does not hold them.
  std::vector<at::Tensor> pieces(const at::Tensor& tensor, int64_t part,
                                 const char* call) const;
  c10::intrusive_ptr<c10d::Work> make_work(ddp::WorkPtr work, c10d::OpType type,
                                           std::chrono::milliseconds timeout,
                                           std::vector<at::Tensor> results) const;

  const ddp::ProcessGroupPtr group_;
};

}  // namespace ddp_torch
