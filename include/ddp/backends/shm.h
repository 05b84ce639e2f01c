// The shared-memory backend ("shm"): collectives between ranks on one host
// through one segment in /dev/shm, without the kernel's network stack.
//
// Contract
// - Construction is a rendezvous through `store`: every rank of [0, size)
//   must construct one with the same store (or store prefix) and size. Ranks
//   publish their host identity (boot id and host name) and process id; when
//   not all ranks are on one host, every rank raises InvalidArgument naming
//   the hosts (use "gloo", or the hierarchical backend, across hosts). It
//   returns once every rank has mapped the segment, or raises TimeoutError
//   naming the missing ranks (within options.timeout).
// - The segment's name is unique to the group (a random token from rank 0);
//   it is unlinked as soon as every rank has mapped it, so it never outlives
//   the job, whatever way the processes end.
// - One progress thread per group runs the operations in issue order; their
//   Works complete in issue order, and consecutive operations overlap (a
//   rank starts the next one while slower ranks finish the previous one).
//   A small operation (ShmOptions::inline_bytes) issued while the group is
//   idle runs on the calling thread instead, when every peer is inside it
//   too (or gets there within a few microseconds of spinning): it returns
//   complete, with no hand-off. So a call never waits for a peer that has
//   not arrived; issue order holds either way.
// - Faults: a peer whose process dies, exits, or closes its group while
//   another rank waits for it makes that rank's Work fail within about
//   `liveness_interval` with a CommunicationError naming the peer; a peer
//   that is stopped or never issues the operation makes it fail with a
//   TimeoutError naming the peer and its process state after the timeout.
//   The first rank to fail marks the segment broken, and every other rank
//   fails at once citing it. The group is broken from then on.
// - Ranks that issue different collectives (another kind, element count,
//   dtype, reduce op or root, or one that skips one) fail before any data
//   is mixed, always (DDP_DEBUG need not be set): the rank that finds it
//   with CollectiveMismatch naming both operations, the others as above.
// - Results are the same on every rank, bit for bit (each element is reduced
//   once, in a fixed order, by one rank).
#pragma once

#include <ddp/backend.h>
#include <ddp/process_group.h>
#include <ddp/store.h>

#include <torch/arg.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace ddp {

struct ShmOptions : BackendOptions {
  // Bytes each rank contributes per pipeline step: large tensors travel in
  // chunks of this size through a ring of `slots` slots per rank. A multiple
  // of 64, at least 4096. Default 256 KiB (a chunk, its reduction and its
  // copies stay in L2).
  TORCH_ARG(int64_t, chunk_bytes) = 256 << 10;
  // Slots per rank in the ring: how many steps a fast rank may run ahead of
  // the slowest. The segment holds size * slots * chunk_bytes bytes. Default 8.
  TORCH_ARG(int, slots) = 8;
  // All-reduces of at most this many bytes take the low-latency path (each
  // rank copies its tensor into its slot, then every rank reduces all slots:
  // one synchronisation instead of three). At most chunk_bytes. Default 32 KiB.
  TORCH_ARG(int64_t, small_bytes) = 32 << 10;
  // All-reduces, broadcasts and barriers of at most this many bytes run on
  // the calling thread when the group is idle and the peers are there (see
  // the contract): about half the latency of a hand-off to the progress
  // thread. 0 sends every operation to the progress thread. Default 32 KiB.
  TORCH_ARG(int64_t, inline_bytes) = 32 << 10;
  // Most polls of a peer's flag before a waiting rank blocks in futex(2).
  // The budget adapts between 64 and this: it halves after a wait that
  // spinning did not end (the peer is not running: ranks share cores) and
  // doubles after one it did. Default 20000 (about half a millisecond);
  // 0 blocks at once.
  TORCH_ARG(int, spin_iterations) = 20000;
  // How often a blocked rank checks its peers' processes (dead, exited,
  // stopped) and the segment's broken flag. Default 100 ms.
  TORCH_ARG(std::chrono::milliseconds, liveness_interval) = std::chrono::milliseconds(100);
  // Default timeout of every collective and of the set-up.
  TORCH_ARG(std::chrono::milliseconds, timeout) = kDefaultTimeout;
};

class ShmProcessGroup : public ProcessGroup {
 public:
  // Sets up the segment through `store` (keys under the store as given: wrap
  // it in a c10d::PrefixStore to run several groups on one store).
  ShmProcessGroup(StorePtr store, int rank, int size, ShmOptions options = {});
  // Runs the queued operations, then tells the peers this rank has left.
  ~ShmProcessGroup() override;

  std::string backend_name() const override { return "shm"; }
  const ShmOptions& options() const;

  // The CPU backends' rule: CPU tensors of float32, float64, float16,
  // bfloat16, int32, int64 or uint8.
  std::string unsupported_reason(const at::Tensor& tensor) const override;

  // A region of /dev/shm that every rank maps (src/collectives/shm/zero_copy.h):
  // an allreduce of a tensor in it reads the peers' parts and writes the
  // result into them directly, moving 2 bytes per reduced byte instead of 4.5.
  at::Tensor allocate_zero_copy(int64_t bytes) override;

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
