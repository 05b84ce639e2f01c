// Where the Reducer is in an iteration, and what it has seen of it: the
// state that Algorithm 1's functions (forward, autograd_hook, and the
// finalizing step the paper omits) hand to each other.
//
//        prepare_for_backward(sync)          first gradient hook or backward
//   IDLE ------------------------> REDUCING   start: queues the end-of-backward
//    | \                              |       callback
//    |  \ prepare_for_backward         | end of backward
//    |   v (no_sync)                   v
//    |   ACCUMULATING              FINALIZING --(status, checks, write-back)--> IDLE
//    |   (until the next prepare_for_backward)
//    +--shadow_iteration() (Join)--> SHADOWING --(zeros, status, write-back)--> IDLE
//
// Join with a model that has collectives of its own: prepare_for_shadow_backward
// starts a REDUCING iteration marked `joined` (this rank is out of inputs
// and replays an empty batch): its gradients go in as zeros, the used bitmap
// stays empty and the status says joined.
//
// A gradient hook in IDLE is a backward() that no forward prepared; in
// ACCUMULATING it only marks its parameter used; in REDUCING it fills the
// parameter's bucket slice and launches the buckets that became ready.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <vector>

namespace ddp::detail {

enum class Phase {
  IDLE,          // no forward prepared since the last synchronized backward ended
  ACCUMULATING,  // no_sync: gradients accumulate in .grad; used parameters are remembered
  REDUCING,      // gradients go into bucket slices; full buckets launch in index order
  FINALIZING,    // end of backward: what is missing, status exchange, checks, write-back
  SHADOWING,     // Join: this rank is out of inputs; one backward's collectives, as zeros
};

struct Iteration {
  using Clock = std::chrono::steady_clock;

  Phase phase = Phase::IDLE;
  std::vector<bool> ready;       // parameter i's slice holds its contribution
  std::vector<int> arrivals;     // gradient hook calls per parameter (static_graph counts them)
  size_t next_launch = 0;        // buckets [0, next_launch) are launched
  bool joined = false;           // Join: this rank contributes nothing (zeros, status joined)
  bool finalize_queued = false;  // the end-of-backward callback is registered
  std::optional<Clock::time_point> backward_start;  // the outermost backward began
  std::optional<Clock::time_point> comm_start;      // the first bucket was launched
  Clock::time_point last_hook;                      // the last gradient hook ran

  // A synchronized iteration begins (REDUCING) over `params` parameters.
  void begin_reducing(size_t params) {
    phase = Phase::REDUCING;
    ready.assign(params, false);
    arrivals.assign(params, 0);
    next_launch = 0;
    joined = false;
    finalize_queued = false;
    backward_start.reset();
    comm_start.reset();
  }
};

}  // namespace ddp::detail
