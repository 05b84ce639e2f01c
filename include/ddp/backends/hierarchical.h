// The hierarchical group: ranks grouped by host, collectives composed of a
// fast group inside each host (shared memory) and a group across hosts.
//
// allreduce of n elements with L ranks on every host (paper §3.3's
// composition of backends; NCCL and Horovod do the same):
//   1. reduce-scatter inside the host: local rank j gets slice j (n/L
//      elements) reduced over its host;
//   2. all-reduce of slice j across hosts, by the ranks of local index j, on
//      their own cross-host group: every local rank talks across hosts at
//      once, and each host sends each gradient byte across once (a flat ring
//      over all ranks sends 2(N-1)/N of them per rank);
//   3. all-gather inside the host.
// Hosts with different numbers of ranks: all-reduce inside the host, then the
// hosts' first ranks all-reduce across hosts, then broadcast inside the host.
// Other collectives (broadcast, allgather, reduce_scatter, barrier) run on a
// flat group of the cross-host backend over all ranks.
//
// Contract (ProcessGroup's, and)
// - Works complete in issue order; consecutive all-reduces are pipelined:
//   stage 1 of the next runs while stage 2 of the previous crosses hosts.
//   Each stage runs on its own group, so every group sees its collectives in
//   the same order on every rank.
// - A failure in any stage fails the Work with that stage's error (which
//   names the peer) and breaks the group.
#pragma once

#include <ddp/backend.h>
#include <ddp/process_group.h>

#include <torch/arg.h>

#include <memory>
#include <string>
#include <vector>

namespace ddp {

// Pass as InitOptions::backend_options with backend "hierarchical" or "auto"
// ("auto" also takes GlooOptions, as cross_options, or ShmOptions, as
// local_options: used if it picks that backend; GlooOptions make the
// cross-host backend gloo, whatever DDP_CROSS_BACKEND says).
struct HierarchicalOptions : BackendOptions {
  // The backend inside a host. Default "shm".
  TORCH_ARG(std::string, local_backend) = "shm";
  // The backend across hosts: "gloo", "mpi" (under mpirun; the store is
  // still needed, for the groups inside each host: pass MASTER_ADDR and
  // MASTER_PORT with mpirun -x), or any registered one. Default "":
  // $DDP_CROSS_BACKEND when set, else "gloo".
  TORCH_ARG(std::string, cross_backend) = "";
  // Options of the local backend's groups. Default null (its defaults).
  TORCH_ARG(BackendOptionsPtr, local_options) = nullptr;
  // Options of the cross-host backend's groups. Default null.
  TORCH_ARG(BackendOptionsPtr, cross_options) = nullptr;
};

// The cross-host backend `options` stands for: cross_backend() when not
// empty, else $DDP_CROSS_BACKEND when set, else "gloo".
std::string resolve_cross_backend(const HierarchicalOptions& options);

class HierarchicalProcessGroup : public ProcessGroup {
 public:
  // `host_of_rank[r]` labels rank r's host (any strings; equal = same host);
  // `setup` is this rank's (its store is split into sub-stores per group).
  // Collective: every rank constructs one with the same labels.
  HierarchicalProcessGroup(const BackendSetup& setup, std::vector<std::string> host_of_rank,
                           HierarchicalOptions options = {});
  ~HierarchicalProcessGroup() override;

  std::string backend_name() const override;
  std::string unsupported_reason(const at::Tensor& tensor) const override;

  int local_rank() const;
  int local_size() const;
  int host_index() const;
  int host_count() const;

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
