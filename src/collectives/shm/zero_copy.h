// Zero-copy all-reduce of the shm backend (ProcessGroup::allocate_zero_copy):
// tensors that live in a region every rank of the group maps are reduced
// where they lie, without going through the slots.
//
// A region holds `per_rank` bytes for each rank, rank r's part at
// base + r * per_rank. Every rank all-reduces a tensor at the same offset of
// its own part (DDP lays its buckets out alike on every rank). Step s:
//   1. every rank writes its descriptor (channel.h: region, offset, count,
//      dtype, op) and publishes COPIED: its tensor holds its contribution;
//   2. once all have, rank r checks every descriptor against its own (a
//      rank that runs anything else fails the group on every rank), reduces
//      slice r of the tensor over every rank's part into its own part, and
//      copies the result into slice r of every other part, chunk by chunk
//      while it is in cache; then publishes REDUCED;
//   3. once all have, every part holds the whole result: CONSUMED.
// Between 1 and 3 slice q of every part is read and written by rank q alone,
// and no user code touches the tensor (its Work is pending), so no byte has
// two writers; slices are whole 64-byte units (slices.h), so at a 64-byte
// aligned offset (DDP's buckets) no cache line has either; any other offset
// is correct, only slower. Ordering: descriptor and data stores come before the COPIED
// (and REDUCED) release stores, and a peer's acquire load that sees them
// makes them visible (as in channel.h).
// Memory traffic per all-reduced byte, per rank: reads 1 (its slice of the w
// parts), writes 1 (its slice into the w parts): 2 bytes, against 4.5
// through the slots (pipeline.cpp), as no copy in or out is left.
#pragma once

#include "collectives/shm/channel.h"

#include <ddp/process_group.h>

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ddp::detail::shm {

// One zero-copy region, mapped; unmapped when the last owner lets go (the
// tensors carved from it hold it).
class Region {
 public:
  Region(uint64_t id, char* base, size_t per_rank, int world)
      : id_(id), base_(base), per_rank_(per_rank), world_(world) {}
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  uint64_t id() const { return id_; }
  size_t per_rank() const { return per_rank_; }
  char* part(int rank) const { return base_ + static_cast<size_t>(rank) * per_rank_; }

 private:
  const uint64_t id_;
  char* const base_;
  const size_t per_rank_;
  const int world_;
};

// Collective, as an operation of the group: rank 0 creates a fresh
// /dev/shm file of world * per_rank bytes and passes its name through its
// slot (or why it could not: /dev/shm too small, and then every rank returns
// null and the caller uses private memory); every rank maps it;
// in one more step every rank tells rank 0 it has, and rank 0 removes the
// name (also when a rank failed) before it lets them return: from then on
// the memory lives only as long as some rank maps it.
std::shared_ptr<Region> allocate_region(Channel& ch, uint64_t id, size_t per_rank);

// All-reduces `tensor`, which lies at byte `offset` of this rank's part of
// `region`, as described above.
void allreduce_in_region(Channel& ch, const Region& region, size_t offset, const at::Tensor& tensor,
                         ReduceOp op);

}  // namespace ddp::detail::shm
