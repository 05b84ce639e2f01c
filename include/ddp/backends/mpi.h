// The MPI backend: collectives through MPI (written on Debian's Open MPI 4.1).
//
// Contract
// - Launch: under an MPI launcher (mpirun, srun). The world is MPI's:
//   rank and size come from MPI_COMM_WORLD, no store or MASTER_ADDR is used.
//   Started outside one (ddprun, torchrun), Open MPI makes every process a
//   world of its own; when the environment says WORLD_SIZE > 1 the
//   constructor raises InvalidArgument (use DDP_BACKEND=gloo under ddprun).
// - MPI is initialised on first use, with MPI_Init_thread asking for
//   MPI_THREAD_MULTIPLE (each group calls MPI from its own worker thread);
//   a lower granted level is an InvalidArgument saying what was required and
//   what was granted. ddp finalizes MPI at exit only if ddp initialised it;
//   a program that initialises MPI itself must ask for MPI_THREAD_MULTIPLE
//   and finalizes it itself, after destroying its groups.
// - Construction is collective over the group's members (the first one
//   also initialises MPI, collective over the whole job): every member
//   constructs its groups in the same order. Each group runs on its own
//   communicator (a duplicate of MPI_COMM_WORLD, or for a group of some of
//   its ranks one made by MPI_Comm_create_group over them alone), so several
//   groups (round-robin, the stages of a hierarchical group) and the
//   DDP_DEBUG=detail wrapper do not mix their messages.
// - Inside the hierarchical group (HierarchicalOptions::cross_backend "mpi",
//   or DDP_CROSS_BACKEND=mpi) each cross-host group is such a sub-group. Its
//   members first meet on the store, bounded by the group's timeout, and
//   check that their ranks are MPI's, so that a missing or misnumbered
//   member is an error naming it, not a hang in MPI_Comm_create_group.
// - Work runs on one worker thread per group, through MPI's nonblocking
//   collectives, so Works complete in issue order. A small collective
//   (MpiOptions::inline_bytes) issued while the group is idle is started on
//   the calling thread instead, and returns complete if MPI completes it
//   within a few microseconds of polling; else the worker polls on. Issue
//   order holds either way.
// - Errors: an MPI error is a CommunicationError naming the rank, the
//   operation and MPI's message; the group is broken from then on. A peer
//   that dies ends the job: mpirun kills the other ranks and names the dead
//   one.
// - Timeouts: a collective not complete within the group's timeout fails with
//   TimeoutError naming the operation and the rank, and breaks the group. MPI
//   collectives cannot be cancelled: the operation's buffers stay allocated
//   and the process should exit (ddp then skips MPI_Finalize, which could
//   wait for the stuck collective; mpirun reports the exit).
// - Element counts per tensor are MPI's `int`: at most 2^31 - 1 elements.
#pragma once

#include <ddp/backend.h>
#include <ddp/process_group.h>

#include <torch/arg.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace ddp {

struct MpiOptions : BackendOptions {
  // How long the worker sleeps between two MPI_Test polls of a running
  // collective. Default 0: it polls without sleeping, as MPI's own blocking
  // calls spin (lowest latency; one core busy while a collective runs).
  // A positive value frees the core at the cost of up to that much latency.
  // As the cross-host part of the hierarchical group (or of auto) without
  // options of its own, mpi polls every 50 us instead: there every rank's
  // worker would spin through each slice's time on the wire, on cores the
  // ranks of a host share (measured: 13 % slower DDP iterations, 2 nodes x
  // 2 ranks on 2 cores, docs/experiments/hierarchical.md).
  TORCH_ARG(std::chrono::microseconds, poll_interval) = std::chrono::microseconds(0);
  // Collectives of at most this many bytes are started on the calling
  // thread when the group is idle (see the contract), saving the hand-off to
  // the worker: at 4 KB, most of the time of a collective. 0 sends every
  // collective to the worker. Default 64 KiB.
  TORCH_ARG(int64_t, inline_bytes) = 64 << 10;
};

class MpiProcessGroup : public ProcessGroup {
 public:
  // Initialises MPI if needed, then makes the group's communicator over
  // `world_ranks` (ranks of MPI_COMM_WORLD, group rank r being
  // world_ranks[r]; distinct, this process among them; InvalidArgument
  // otherwise), collective over them alone. Default empty: all of
  // MPI_COMM_WORLD, duplicated. `index` tells the groups of one process
  // apart in MPI's names for them.
  explicit MpiProcessGroup(std::chrono::milliseconds timeout = kDefaultTimeout,
                           MpiOptions options = {}, int index = 0,
                           std::vector<int> world_ranks = {});
  ~MpiProcessGroup() override;

  std::string backend_name() const override { return "mpi"; }
  // CPU tensors of the seven dtypes (see process_group.h).
  std::string unsupported_reason(const at::Tensor& tensor) const override;
  const MpiOptions& options() const;

 protected:
  WorkPtr do_allreduce(at::Tensor tensor, ReduceOp op) override;
  WorkPtr do_allreduce_coalesced(std::vector<at::Tensor> tensors, ReduceOp op) override;
  WorkPtr do_broadcast(at::Tensor tensor, int root) override;
  WorkPtr do_allgather(std::vector<at::Tensor> outputs, at::Tensor input) override;
  WorkPtr do_reduce_scatter(at::Tensor output, std::vector<at::Tensor> inputs,
                            ReduceOp op) override;
  WorkPtr do_barrier() override;
  bool reads_inputs_on_queue() const override;  // true: every operation is queued

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp
