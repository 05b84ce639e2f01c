// The Gloo backend: collectives over TCP, written on libgloo's API.
//
// Contract
// - Construction is a rendezvous: every rank of [0, size) must construct one
//   with the same store (or the same store prefix) and size; it returns once
//   all ranks are connected, or raises TimeoutError saying how many of how many
//   ranks arrived (within options.timeout).
// - Work runs on `threads` worker threads. Operations are tagged with their
//   issue number, so several may run at once; their Works still complete in
//   issue order.
// - When a peer dies or a connection breaks, the pending Work fails within
//   the timeout with a CommunicationError naming the peer rank, and the group
//   is broken from then on (see process_group.h).
#pragma once

#include <ddp/backend.h>
#include <ddp/process_group.h>
#include <ddp/store.h>

#include <torch/arg.h>

#include <chrono>
#include <memory>
#include <string>

namespace ddp {

// Pass as InitOptions::backend_options (a shared_ptr) with backend "gloo", or
// "auto" (which uses them where it picks gloo: across hosts).
struct GlooOptions : BackendOptions {
  enum class Algorithm {
    RING,   // bandwidth-optimal ring (reduce-scatter + allgather)
    BCUBE,  // Gloo's BCube: fewer steps, better for small messages
  };

  // Worker threads executing collectives. Default 1 (PyTorch's
  // ProcessGroupGloo uses 2; measured, DDP training here ran no faster with
  // 2); more lets several collectives travel at once.
  TORCH_ARG(int, threads) = 1;
  // Network interface to bind to, e.g. "eth0". Default: $DDP_SOCKET_IFNAME,
  // else $GLOO_SOCKET_IFNAME, else `hostname` below.
  TORCH_ARG(std::string, interface) = "";
  // Host name or address to bind to when no interface is named. Default:
  // the local address that routes to the rendezvous master, else this
  // machine's host name when it resolves to a local address, else 127.0.0.1.
  TORCH_ARG(std::string, hostname) = "";
  // Gloo's allreduce algorithm. Default RING.
  TORCH_ARG(Algorithm, algorithm) = Algorithm::RING;
  // Default timeout of every collective and of the connection set-up. In a
  // group built by name (init_process_group), InitOptions::timeout.
  TORCH_ARG(std::chrono::milliseconds, timeout) = kDefaultTimeout;
};

class GlooProcessGroup : public ProcessGroup {
 public:
  // Connects to every other rank through `store`. Keys are written under
  // the store as given: wrap it in a c10d::PrefixStore to run several groups
  // on one store.
  GlooProcessGroup(StorePtr store, int rank, int size, GlooOptions options = {});
  ~GlooProcessGroup() override;

  std::string backend_name() const override { return "gloo"; }
  // CPU tensors of dtype Float, Double, Half, BFloat16, Int, Long or Byte.
  std::string unsupported_reason(const at::Tensor& tensor) const override;
  const GlooOptions& options() const;

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
