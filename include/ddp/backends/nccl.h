// The NCCL backend: collectives on CUDA tensors through NCCL's C API
// (written on NCCL 2.28, the one PyTorch 2.11's wheel brings; 2.30 and later
// also let ranks share a GPU).
//
// Contract
// - Launch: any launcher that sets up a store (ddprun, torchrun, env://).
//   Rank 0 makes NCCL's unique id and the ranks exchange it through the
//   store, with each rank's host and GPU. Two ranks on one GPU are an
//   InvalidArgument on every rank naming both, unless the loaded NCCL is
//   2.30 or later and NCCL_MULTI_RANK_GPU_ENABLE=1 is set (the error names
//   what is missing; shm also takes ranks sharing a GPU, staging CUDA
//   tensors through host memory).
// - The NCCL used is the libnccl.so.2 the process loaded first (LD_PRELOAD
//   wins; else whichever of libddp and libtorch asks first, usually the one
//   beside libtorch), which may not be the one whose headers libddp was
//   compiled with. Making a group checks that the loaded one is of the same
//   major version and no older, and refuses it otherwise, naming both and
//   the file; nccl_version() says which one runs.
// - The communicator is made non-blocking: its initialisation and every
//   collective are polled, so a peer that never arrives ends in a
//   TimeoutError after the group's timeout, and the communicator is aborted
//   rather than left waiting.
// - Tensors: CUDA tensors on the group's GPU (NcclOptions::device), of
//   dtype float32, float64, float16, bfloat16, int32, int64 or uint8;
//   float16 and bfloat16 are reduced natively. Counts are NCCL's size_t.
//   CPU tensors are staged through the group's GPU (process_group.h), so
//   DDP's own small CPU collectives work over nccl too.
// - Streams: each group has its own stream. A collective is ordered after
//   the work already queued on the caller's current stream (an event the
//   group's stream waits for), and its tensors are kept alive for the
//   caching allocator until it ends. No host thread blocks per collective.
// - Completion: a Work completes when its collective has finished on the
//   GPU (one watchdog thread per group polls the collectives' end events),
//   so a waited Work's tensors may be read on any stream. Works complete in
//   issue order.
// - Failures: the watchdog polls ncclCommGetAsyncError and enforces each
//   Work's deadline (the group's timeout); on an error or a timeout it
//   aborts the communicator and fails every pending Work with a
//   CommunicationError (TimeoutError) naming the operation, the rank and
//   the group. The group is broken from then on.
#pragma once

#include <ddp/backend.h>
#include <ddp/process_group.h>

#include <torch/arg.h>

#include <memory>
#include <string>

namespace ddp {

struct NcclOptions : BackendOptions {
  // The CUDA device index of this rank's GPU. Default -1: ddp::local_device()
  // (ddp/device.h: the launcher's local rank modulo the GPUs visible), as
  // torchrun's and ddprun's one-GPU-per-rank layout expects.
  TORCH_ARG(int, device) = -1;
};

class NcclProcessGroup : public ProcessGroup {
 public:
  // Collective over the group's ranks: exchanges NCCL's id through `store`
  // and makes the communicator, within `timeout`.
  NcclProcessGroup(StorePtr store, int rank, int size,
                   std::chrono::milliseconds timeout = kDefaultTimeout, NcclOptions options = {});
  ~NcclProcessGroup() override;

  std::string backend_name() const override { return "nccl"; }
  // CUDA tensors on device() of the seven dtypes.
  std::string unsupported_reason(const at::Tensor& tensor) const override;
  bool handles_device(c10::DeviceType type) const override;  // CUDA
  c10::Device staging_device() const override;               // device()
  // This rank's GPU.
  c10::Device device() const;
  // Aborts the communicator and fails every pending Work (ProcessGroup::abort).
  void abort(const std::string& reason) override;
  // The loaded NCCL's version, e.g. "2.28.9".
  static std::string nccl_version();

 protected:
  WorkPtr do_allreduce(at::Tensor tensor, ReduceOp op) override;
  WorkPtr do_allreduce_coalesced(std::vector<at::Tensor> tensors, ReduceOp op) override;
  WorkPtr do_broadcast(at::Tensor tensor, int root) override;
  WorkPtr do_allgather(std::vector<at::Tensor> outputs, at::Tensor input) override;
  WorkPtr do_reduce_scatter(at::Tensor output, std::vector<at::Tensor> inputs,
                            ReduceOp op) override;
  WorkPtr do_barrier() override;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp
