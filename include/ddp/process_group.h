// ProcessGroup: the collective communication layer (paper §3.3).
//
// Contract
// - Every operation is asynchronous: it validates its arguments on the
//   caller's thread (InvalidArgument on misuse, naming the rank and the
//   argument), then returns a Work at once. Tensors must stay alive and
//   untouched until the Work completes.
// - Every rank must issue the same collectives, in the same order, with
//   tensors of the same dtype and element count. With DDP_DEBUG=detail a
//   fingerprint of each collective is compared across ranks first and a
//   disagreement raises CollectiveMismatch on every rank.
// - Operations issued from one thread complete in issue order; many may be in
//   flight at once.
// - Tensors: dense and contiguous, zero elements allowed; which devices and
//   dtypes a group takes is its backend's to say (unsupported_reason). The
//   CPU backends (gloo, mpi, shm) take tensors of dtype float32, float64,
//   float16, bfloat16, int32, int64 or uint8. A CPU or CUDA tensor on a
//   device the backend does not handle is staged (src/collectives/staging.h):
//   copied to staging_device() after the work queued on the caller's current
//   stream, reduced there and copied back before the Work completes. So the
//   CPU backends take CUDA tensors through pinned host memory (the copies on
//   streams of their own, waited for by neither the caller nor the worker),
//   and nccl CPU tensors through its GPU.
// - After a communication failure the group is broken: the failed Work and all
//   later ones raise CommunicationError (or TimeoutError) with the first cause.
// - Thread-safe: operations may be issued from several threads, but then the
//   caller must make every rank issue them in the same order.
#pragma once

#include <ddp/errors.h>
#include <ddp/work.h>

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ddp {

namespace detail {
class IssuedLog;
class Staging;
class StagingOrder;
}

enum class ReduceOp : uint8_t { SUM, AVG, MIN, MAX, PRODUCT };

// "SUM", "AVG", ...
const char* to_string(ReduceOp op);

// The collective kinds, for backends and error messages.
enum class OpKind : uint8_t {
  ALLREDUCE,
  ALLREDUCE_COALESCED,
  BROADCAST,
  ALLGATHER,
  REDUCE_SCATTER,
  BARRIER
};
// "allreduce", "broadcast", ...
const char* to_string(OpKind kind);

// PyTorch's default collective timeout.
constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(30);

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size, std::chrono::milliseconds timeout);
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Default timeout of every Work this group issues.
  std::chrono::milliseconds timeout() const { return timeout_; }
  virtual std::string backend_name() const = 0;
  // Why this group cannot take `tensor` (its device or dtype), naming the
  // backend and what to do; "" when it can. Every operation checks each of
  // its tensors with it. Default: "" (any tensor).
  virtual std::string unsupported_reason(const at::Tensor& tensor) const;
  // Whether the backend moves tensors on devices of `type` itself; CPU and
  // CUDA tensors on another device are staged on staging_device(). Default:
  // the CPU only.
  virtual bool handles_device(c10::DeviceType type) const;
  // Where such tensors are staged. Default: the CPU (pinned memory).
  virtual c10::Device staging_device() const;

  // In place: every rank's `tensor` becomes the reduction over all ranks. AVG
  // is defined for floating dtypes only (use SUM on integers and divide).
  WorkPtr allreduce(at::Tensor tensor, ReduceOp op = ReduceOp::SUM);
  // Like allreduce on each tensor, but as one collective over their
  // concatenation. All tensors share one dtype.
  WorkPtr allreduce_coalesced(std::vector<at::Tensor> tensors, ReduceOp op = ReduceOp::SUM);
  // In place: every rank's `tensor` becomes `root`'s.
  WorkPtr broadcast(at::Tensor tensor, int root = 0);
  // outputs[r] receives rank r's `input`; outputs.size() == size(), each with
  // input's dtype and element count.
  WorkPtr allgather(std::vector<at::Tensor> outputs, at::Tensor input);
  // `output` (on rank r) receives the reduction over all ranks of inputs[r];
  // inputs.size() == size(), each with output's dtype and element count.
  WorkPtr reduce_scatter(at::Tensor output, std::vector<at::Tensor> inputs,
                         ReduceOp op = ReduceOp::SUM);
  // Completes once every rank has called it.
  WorkPtr barrier();

  // Collective: `bytes` (the same on every rank) of memory whose tensors this
  // group's allreduce reduces where they lie, with no copy in or out (the shm
  // backend: a region that every rank maps), as a uint8 tensor of zeros; an
  // undefined tensor on every rank where the backend has no such memory (the
  // default) or no room for it.
  // Carve tensors from it at the same offsets on every rank, and allreduce
  // them in the same order (DDP's buckets do): a rank that allreduces another
  // part, or another tensor, at that point fails the group on every rank.
  // The memory lives as long as a tensor on it does.
  virtual at::Tensor allocate_zero_copy(int64_t bytes);

  // Breaks this group on this rank: pending and later operations fail with a
  // CommunicationError carrying `reason`. For a watcher that learns that a
  // peer is gone before the backend can (the elastic runner's heartbeat).
  // The nccl backend aborts its communicator (a dead peer's collective would
  // otherwise wait for the group's timeout); the default does nothing, as
  // shm, gloo and mpi notice a dead peer themselves. Thread-safe.
  virtual void abort(const std::string& reason);

  // This rank, the group's size and backend, and `operation`: the context of
  // the errors raised about this group (ddp/errors.h).
  ErrorContext error_context(std::string operation = {}) const;

 protected:
  // Backends implement these; arguments are already validated.
  virtual WorkPtr do_allreduce(at::Tensor tensor, ReduceOp op) = 0;
  virtual WorkPtr do_allreduce_coalesced(std::vector<at::Tensor> tensors, ReduceOp op) = 0;
  virtual WorkPtr do_broadcast(at::Tensor tensor, int root) = 0;
  virtual WorkPtr do_allgather(std::vector<at::Tensor> outputs, at::Tensor input) = 0;
  virtual WorkPtr do_reduce_scatter(at::Tensor output, std::vector<at::Tensor> inputs,
                                    ReduceOp op) = 0;
  virtual WorkPtr do_barrier() = 0;

  // Whether every do_* call queues its operation on the group's
  // detail::TaskQueue, whose worker reads the inputs: then a staged
  // operation's copies to the host are waited for there, and the caller's
  // thread returns at once (src/collectives/staging_gate.h). Default: false
  // (staging waits for them before the do_* call).
  virtual bool reads_inputs_on_queue() const;

  // "rank 1 of 4 [gloo]" — how errors name this process
  // (format_context(error_context())).
  std::string where() const;

 private:
  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;

  // What it issued: the tally DDP compares across ranks, and its recording
  // in the flight recorder (src/collectives/issued_log.h).
  friend class detail::IssuedLog;
  const std::unique_ptr<detail::IssuedLog> issued_;
  // The staging of an operation on tensors like `tensor` (Checker::staged).
  detail::Staging staging_for(const at::Tensor& tensor) const;
  // Keeps Works in issue order while staged ones complete late.
  const std::unique_ptr<detail::StagingOrder> staging_order_;
};

using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

}  // namespace ddp
