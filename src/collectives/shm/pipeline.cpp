// Per chunk i (step base + i), rank r owning the slice [lo(r), lo(r+1)):
//   copy    every slice but its own into its slot               -> COPIED
//   reduce  its own slice: the tensor's slice with every peer's
//           slot slice, in place; then into its slot            -> REDUCED
//   out     every peer's reduced slice out of that peer's slot  -> CONSUMED
//
// A rank does not run chunk by chunk in lockstep. It keeps three cursors
// (chunks copied, reduced, out; out <= reduced <= copied) and each time
// around does the oldest action whose inputs are ready: out, else reduce,
// else copy the next chunk in, as far as `slots` chunks ahead of its own
// `out` (and of every peer's CONSUMED: the slot-free rule of channel.h).
// Only when nothing is ready does it spin, then block on the oldest action's
// missing input. So when the ranks share fewer cores than they are (a loaded
// machine), a rank that gets the CPU while its peer sleeps copies up to
// `slots` chunks ahead, and the peer then finds that many ready: one sleep
// per `slots` chunks rather than one or two per chunk. Blocking on the oldest
// action cannot deadlock: the peer can always produce what it needs (the
// reduce of a chunk this rank has copied, the copy of a chunk whose slot this
// rank has consumed).
//
// Memory traffic per all-reduced byte, per rank (its own slice never goes
// through shared memory): reads (w-1)/w + 1 + 1/w + (w-1)/w, writes
// (w-1)/w + (w-1)/w + 1/w + (w-1)/w: 2.5 + 2.0 = 4.5 bytes for w = 2.
#include "collectives/shm/pipeline.h"

#include "collectives/shm/slices.h"

#include <algorithm>
#include <cstring>

namespace ddp::detail::shm {
namespace {

class Pipeline {
 public:
  Pipeline(Channel& ch, char* data, int64_t n, size_t es, ReduceKernel kernel)
      : ch_(ch),
        data_(data),
        n_(n),
        es_(es),
        kernel_(kernel),
        per_step_(ch.chunk_bytes() / static_cast<int64_t>(es)),
        steps_(static_cast<uint64_t>((n + per_step_ - 1) / per_step_)),
        base_(ch.take_steps(steps_)),
        slots_(static_cast<uint64_t>(ch.slots())) {}

  void run() {
    while (out_ < steps_) {
      if (step_once()) continue;
      bool ready = false;
      for (int i = 0; i < ch_.spin_budget() && !ready; ++i) {
        cpu_relax();
        ready = can_out() || can_reduce() || can_copy();
      }
      ch_.spin_outcome(ready);
      if (!ready) block_on_oldest();
    }
  }

 private:
  bool can_out() const { return out_ < reduced_ && ch_.all_reached(REDUCED, base_ + out_); }
  bool can_reduce() const {
    return reduced_ < copied_ && ch_.all_reached(COPIED, base_ + reduced_);
  }
  bool can_copy() const {
    if (copied_ >= steps_ || copied_ >= out_ + slots_) return false;
    const uint64_t s = base_ + copied_;
    return s < slots_ || ch_.all_reached(CONSUMED, s - slots_);
  }

  // Does the oldest ready action; false if none is ready.
  bool step_once() {
    if (can_out()) {
      for_each_peer_slice(
          out_,
          [&](char* tensor, const char* slot, size_t bytes) { std::memcpy(tensor, slot, bytes); },
          /*from_peers=*/true);
      ch_.publish(CONSUMED, base_ + out_);
      ch_.finish_step(base_ + out_);
      ++out_;
    } else if (can_reduce()) {
      reduce(reduced_);
      ch_.publish(REDUCED, base_ + reduced_);
      ++reduced_;
    } else if (can_copy()) {
      for_each_peer_slice(
          copied_,
          [&](char* tensor, char* slot, size_t bytes) { std::memcpy(slot, tensor, bytes); },
          /*from_peers=*/false);
      ch_.publish(COPIED, base_ + copied_);
      ++copied_;
    } else {
      return false;
    }
    return true;
  }

  // f(tensor bytes, slot bytes, length) for every peer's slice of chunk i:
  // in this rank's slot (copy in), or in the peer's slot (copy out).
  template <typename F>
  void for_each_peer_slice(uint64_t i, F&& f, bool from_peers) {
    const int64_t off = static_cast<int64_t>(i) * per_step_;
    const Slices sl(std::min(per_step_, n_ - off), ch_.world(), es_);
    const uint64_t s = base_ + i;
    for (int q = 0; q < ch_.world(); ++q) {
      if (q == ch_.rank() || sl.len(q) == 0) continue;
      char* slot = ch_.slot(from_peers ? q : ch_.rank(), s) + sl.lo(q) * es_;
      f(data_ + (off + sl.lo(q)) * static_cast<int64_t>(es_), slot, sl.len(q) * es_);
    }
  }

  void reduce(uint64_t i) {
    if (i == 0) ch_.agree_all();  // every rank copied chunk 0 in: its descriptor too
    const int64_t off = static_cast<int64_t>(i) * per_step_;
    const Slices sl(std::min(per_step_, n_ - off), ch_.world(), es_);
    const int r = ch_.rank();
    if (sl.len(r) == 0 || ch_.world() == 1) return;
    const uint64_t s = base_ + i;
    char* own = data_ + (off + sl.lo(r)) * static_cast<int64_t>(es_);
    for (int q = 0; q < ch_.world(); ++q) {
      if (q != r) kernel_(own, own, ch_.slot(q, s) + sl.lo(r) * es_, sl.len(r));
    }
    std::memcpy(ch_.slot(r, s) + sl.lo(r) * es_, own, sl.len(r) * es_);
  }

  // Nothing is ready: sleep until the oldest action's missing input is.
  void block_on_oldest() {
    Phase phase;
    uint64_t step;
    if (out_ < reduced_) {
      phase = REDUCED, step = base_ + out_;
    } else if (reduced_ < copied_) {
      phase = COPIED, step = base_ + reduced_;
    } else {  // all caught up: the next copy waits for its slot
      phase = CONSUMED, step = base_ + copied_ - slots_;
    }
    const int q = ch_.first_behind(phase, step);
    if (q >= 0) ch_.wait(q, phase, step, /*spin=*/false);
  }

  Channel& ch_;
  char* const data_;
  const int64_t n_;
  const size_t es_;
  const ReduceKernel kernel_;
  const int64_t per_step_;
  const uint64_t steps_, base_, slots_;
  uint64_t copied_ = 0, reduced_ = 0, out_ = 0;  // chunks of this operation
};

}  // namespace

void allreduce_pipelined(Channel& ch, char* data, int64_t n, size_t element_size,
                         ReduceKernel kernel) {
  Pipeline(ch, data, n, element_size, kernel).run();
}

}  // namespace ddp::detail::shm
